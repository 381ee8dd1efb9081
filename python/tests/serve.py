"""`fasa serve` for the tests that talk to it over HTTP (the openai client, the chat page)."""
import contextlib
import os
import re
import subprocess
import time

import pytest


@contextlib.contextmanager
def serve(*args):
    """Starts `fasa serve` (the bundled model, 2 threads, `args` added) on a free port; yields its base URL
    (http://127.0.0.1:PORT) once the model is loaded, and stops it on leaving."""
    cli = os.environ.get("FASA_CLI")
    if not cli:
        pytest.skip("FASA_CLI (the fasa binary) is not set: run through ctest")
    proc = subprocess.Popen([cli, "serve", "--port", "0", "--log-disable", "-t", "2", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        for line in proc.stderr:  # the model loads, then the line naming the port
            if m := re.search(r" on http://[^:]+:(\d+) ", line):
                break
            assert time.time() < deadline, "fasa serve did not start"
        else:
            pytest.fail(f"fasa serve exited with {proc.wait()}")
        yield f"http://127.0.0.1:{m.group(1)}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
