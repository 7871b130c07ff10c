"""``python -m scarjax`` is the ``scarjax`` command; a closed pipe ends it quietly."""

import subprocess
import sys


def test_python_m_scarjax_lists_the_experiments():
    out = subprocess.run([sys.executable, "-m", "scarjax", "list"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "fig5_3_qp" in out.stdout and out.stderr == ""


def test_a_closed_pipe_is_not_reported_as_an_error():
    # the reader closes at once (`scarjax list | head -0`): no "error: [Errno 32] Broken pipe" line
    proc = subprocess.Popen([sys.executable, "-c", "import sys, scarjax.cli as c; "
                             "sys.stdout.write(''); sys.exit(c.main(['list']))"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(timeout=120)
    assert "Broken pipe" not in err and "Traceback" not in err, err
