"""`fasa serve` for the tests that talk to it over HTTP (the openai client, the chat page)."""
import contextlib
import os
import re
import subprocess
import tempfile
import time

import pytest


@contextlib.contextmanager
def serve(*args):
    """Starts `fasa serve` (the bundled model, 2 threads, `args` added) on a free port; yields its base URL
    (http://127.0.0.1:PORT) once the model is loaded, and stops it on leaving. Its profile cache is a
    folder of its own: an automatic profile another test measured would change what FASA runs."""
    cli = os.environ.get("FASA_CLI")
    if not cli:
        pytest.skip("FASA_CLI (the fasa binary) is not set: run through ctest")
    with tempfile.TemporaryDirectory() as cache, open(os.path.join(cache, "stderr"), "w+") as log:
        proc = subprocess.Popen([cli, "serve", "--port", "0", "--log-disable", "-t", "2", *args],
                                stdout=subprocess.DEVNULL, stderr=log, env={**os.environ, "XDG_CACHE_HOME": cache})
        try:
            deadline = time.time() + 60
            def text():
                log.seek(0)
                return log.read()
            while not (m := re.search(r" on http://[^:]+:(\d+) ", text())):  # the model loads first
                if proc.poll() is not None:
                    pytest.fail(f"fasa serve exited with {proc.returncode}: {text()}")
                if time.time() > deadline:
                    pytest.fail(f"fasa serve did not start in 60 s: {text()}")
                time.sleep(0.1)
            yield f"http://127.0.0.1:{m.group(1)}"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
