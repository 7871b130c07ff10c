"""Parameter-server tests (a package, so the shared problems import as ``from . import _problems``)."""
