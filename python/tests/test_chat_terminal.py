"""`fasa chat` on a terminal (a pseudo-terminal here): the line can be edited with the cursor keys and an
earlier turn recalled with the up arrow, as libedit gives them (cli/line_reader.cpp). Each reply, greedy,
must equal the reply to the same conversation typed plainly on a pipe; without line editing the keys'
escape sequences would land in the turn and change it."""
import os
import pty
import select
import signal
import subprocess
import time

import pytest

CLI = os.environ.get("FASA_CLI")
if os.environ.get("FASA_CHAT_LINE_EDITING") == "0" and not os.environ.get("FASA_REQUIRE_TEST_DEPS"):
    pytest.skip("fasa was built without libedit (Debian: libedit-dev): fasa chat reads plain lines", allow_module_level=True)
CHAT = ["chat", "--temp", "0", "-n", "6", "-t", "1"]
LEFT, UP = "\x1b[D", "\x1b[A"


def replies_on_a_pipe(turns):
    out = subprocess.run([CLI, *CHAT], input="".join(t + "\n" for t in turns), capture_output=True,
                         text=True, timeout=120, check=True).stdout
    # "\n> TURN\nREPLY\n" per turn
    return [block.split("\n")[1] for block in out.split("\n> ")[1:len(turns) + 1]]


class Terminal:
    def __init__(self, args):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: fasa on the terminal's other side
            os.execve(CLI, [CLI, *args], {**os.environ, "TERM": "xterm"})
        self.seen, self.pos = "", 0  # what the terminal showed; where the last text waited for ended

    def read_until(self, text, timeout=120):
        """Reads the terminal's output until `text` appears after the last text waited for."""
        deadline = time.monotonic() + timeout
        while text not in self.seen[self.pos:] and time.monotonic() < deadline:
            ready, _, _ = select.select([self.fd], [], [], 1.0)
            if ready:
                try:
                    self.seen += os.read(self.fd, 4096).decode("utf-8", "replace")
                except OSError:  # the child has exited
                    break
        if text not in self.seen[self.pos:]:
            raise AssertionError(f"{text!r} not seen within {timeout} s; the terminal showed {self.seen[self.pos:]!r}")
        self.pos = self.seen.index(text, self.pos) + len(text)

    def type(self, keys):
        os.write(self.fd, keys.encode())

    def close(self):
        """The child's exit code; a child still running after 10 s is killed."""
        deadline = time.monotonic() + 10
        while (done := os.waitpid(self.pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        if done[0] == 0:
            os.kill(self.pid, signal.SIGKILL)
            done = os.waitpid(self.pid, 0)
        os.close(self.fd)
        return os.waitstatus_to_exitcode(done[1])


def test_chat_edits_the_line_and_recalls_earlier_turns_on_a_terminal():
    if not CLI:
        pytest.skip("FASA_CLI (the fasa binary) is not set: run through ctest")
    turn = "who made the heaven"
    expected = replies_on_a_pipe([turn, turn])
    assert expected[0] and expected[1], expected
    term = Terminal(CHAT)
    try:
        term.read_until("> ")
        term.type("who made the eaven" + LEFT * 5 + "h\r")  # the missing letter typed where it belongs
        term.read_until("\n")  # the typed line's end; then the reply
        term.read_until(expected[0], timeout=30)
        term.read_until("> ")
        term.type(UP + "\r")  # the same turn again, from the history
        term.read_until("\n")
        term.read_until(expected[1], timeout=30)
        term.read_until("> ")
        term.type("/exit\r")
        term.read_until("decode")  # the speed lines at the end
    finally:
        code = term.close()
    assert code == 0


def test_ctrl_c_at_the_prompt_ends_the_chat_on_a_terminal():
    if not CLI:
        pytest.skip("FASA_CLI (the fasa binary) is not set: run through ctest")
    term = Terminal(CHAT)
    try:
        term.read_until("> ")
        term.type("half a line\x03")  # Ctrl-C (the terminal sends SIGINT)
        term.read_until("decode", timeout=30)  # the speed lines at the end
    finally:
        code = term.close()
    assert code == 0
