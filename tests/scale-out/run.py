#!/usr/bin/env python3
"""ctest: two `fasa serve` replicas on loopback behind HAProxy with tools/scale-out/haproxy.cfg.

Checks what the config promises (docs/SERVER.md, "Several replicas"): each conversation stays on one
replica (its follow-up finds its prompt in that replica's cache), conversations are spread over both,
and a replica killed by PID costs no request sent after it died. Skips (exit 77) without haproxy.
Usage: run.py FASA_BINARY MODEL HAPROXY_CFG
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_replica(fasa, model, log_dir, name):
    log = open(os.path.join(log_dir, name + ".log"), "w+")
    proc = subprocess.Popen([fasa, "serve", "-m", model, "--port", "0", "-np", "2", "-t", "1", "--log-disable"],
                            stdout=subprocess.DEVNULL, stderr=log)
    for _ in range(600):  # the model loads, then the line with the port
        log.seek(0)
        found = re.search(r" on http://[^:]*:(\d+) ", log.read())
        if found:
            return proc, int(found.group(1))
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    log.seek(0)
    sys.exit(f"replica {name} did not start:\n{log.read()}")


def request(url, body=None, headers=None, timeout=120):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=timeout) as res:
        text = res.read().decode()
        return json.loads(text) if body is not None else text


def complete(base, user, prompt):
    return request(base + "/v1/completions",
                   {"prompt": prompt, "max_tokens": 4, "temperature": 0, "user": user})


def tokens_generated(port):
    """The replica's generated tokens so far (HAProxy's health checks do not count)."""
    text = request(f"http://127.0.0.1:{port}/metrics")
    return float(re.search(r"^fasa_generated_tokens_total (\S+)$", text, re.M).group(1))


def main():
    fasa, model, cfg = sys.argv[1:4]
    haproxy = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)
    if not haproxy:
        print("SKIPPED: haproxy is not installed (apt-get install haproxy; .ci/run installs it)")
        return 77
    procs = []
    with tempfile.TemporaryDirectory() as log_dir:
        try:
            (a, port_a), (b, port_b) = (start_replica(fasa, model, log_dir, n) for n in ("a", "b"))
            procs += [a, b]
            listen = free_port()
            env = dict(os.environ, FASA_LISTEN=f"127.0.0.1:{listen}", FASA_A=f"127.0.0.1:{port_a}",
                       FASA_B=f"127.0.0.1:{port_b}")
            lb = subprocess.Popen([haproxy, "-db", "-f", cfg], env=env, stdout=subprocess.DEVNULL,
                                  stderr=open(os.path.join(log_dir, "haproxy.log"), "w"))
            procs.append(lb)
            base = f"http://127.0.0.1:{listen}"
            for _ in range(100):
                try:
                    request(base + "/health")
                    break
                except (urllib.error.URLError, ConnectionError):
                    time.sleep(0.1)
            time.sleep(1.2)  # both replicas seen healthy by a first check

            # Each conversation's second turn extends its first: its prompt is cached on the same replica.
            users = [f"user-{i}" for i in range(8)]
            for user in users:
                first = f"Ge1:1 In the beginning, said {user}, God created"
                reply = complete(base, user, first)
                follow = first + reply["choices"][0]["text"] + " and the earth"
                second = complete(base, user, follow)
                cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
                prompt = reply["usage"]["prompt_tokens"]
                # (all but the last tokens of the first prompt: the reply's first token may tokenize
                # differently after it; other users' prompts share only their first 8 tokens)
                if cached < prompt - 2:
                    sys.exit(f"{user}: follow-up found {cached} cached tokens of {prompt} (another replica?)")
            served = tokens_generated(port_a), tokens_generated(port_b)
            if min(served) == 0:
                sys.exit(f"all conversations went to one replica: tokens generated {served}")
            print(f"8 conversations, follow-ups cached on their replica; tokens generated per replica {served}")

            # A dead replica: its conversations move to the other without a failed request.
            a.send_signal(signal.SIGKILL)
            a.wait()
            for i, user in enumerate(users):
                r = complete(base, user, f"Ge1:{i + 2} And the earth was")
                if not r["choices"][0]["text"]:
                    sys.exit(f"{user}: empty reply after the replica died")
            print(f"replica a (pid {a.pid}) killed: all {len(users)} later requests answered by b")
            return 0
        except urllib.error.HTTPError as e:
            sys.exit(f"HTTP {e.code}: {e.read().decode(errors='replace')}")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
                    p.wait()


if __name__ == "__main__":
    sys.exit(main())
