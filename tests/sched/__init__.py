"""Tests of scarjax.sched (cluster scheduling, thesis Sec 3.4.2 and 3.5)."""
