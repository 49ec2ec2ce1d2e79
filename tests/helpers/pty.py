#!/usr/bin/python3
"""pty.py -- types lines into a program on a pseudo-terminal and prints the transcript.

usage: pty.py [--timeout S] [--prompt-wait S] [--env K=V]... -- CMD [ARGS...] < inputs

Inputs come on stdin, one per line:
  text        wait for a prompt ("> ", ">> ", or a job's "[0-1]> "), then type text and Enter
  @type text  wait for a prompt, then type text without Enter
  @sleep S    wait S seconds
  ^C          send Ctrl-C now (for a running chunk: use @sleep first)
  ^D          wait for a prompt, then send Ctrl-D

Every read has a deadline and the child is killed at the end, so a hung
program fails the test instead of hanging it.  The transcript (escape
sequences and carriage returns removed) goes to stdout, followed by a last
line "EXIT <code>", "EXIT signal <n>" or "EXIT killed" (still running).
"""
import os
import re
import select
import signal
import struct
import sys
import termios
import time

ESCAPES = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]|\x1b[=>]|\x07")


def clean(data):
    return ESCAPES.sub(b"", data).replace(b"\r", b"")


class Session:
    def __init__(self, argv, env):
        pid, fd = os.forkpty()
        if pid == 0:
            try:
                os.execvpe(argv[0], argv, env)
            except OSError as e:
                os.write(2, ("pty.py: cannot run %s: %s\n" % (argv[0], e)).encode())
            os._exit(127)
        self.pid, self.fd = pid, fd
        self.out = b""
        self.status = None
        try:  # 80x24, so line editing has a width to work with
            import fcntl
            fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        except OSError:
            pass

    def pump(self, seconds):
        """Reads whatever arrives within `seconds`; False once the child is gone."""
        ready, _, _ = select.select([self.fd], [], [], max(0.0, seconds))
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            return False
        if not data:
            return False
        self.out += data
        return True

    def since(self, mark):
        return clean(self.out[mark:])

    def editing(self):
        """True once the line editor has the terminal (canonical mode off):
        typing earlier is echoed twice and a Ctrl-D may be lost."""
        try:
            return not termios.tcgetattr(self.fd)[3] & termios.ICANON
        except termios.error:
            return True

    def wait_prompt(self, mark, seconds):
        """Waits until output after `mark` ends with a prompt and the line
        editor reads the terminal (or, without one, 0.5 s after the prompt)."""
        deadline = time.time() + seconds
        prompted = None
        while time.time() < deadline:
            if re.search(rb"(^|\n)(\[[0-9,-]+\])?>>? $", self.since(mark)):
                prompted = prompted or time.time()
                if self.editing() or time.time() - prompted > 0.5:
                    return True
            if not self.pump(min(0.02, deadline - time.time())):
                return False
        return False

    def send(self, data):
        os.write(self.fd, data)

    def finish(self, seconds):
        deadline = time.time() + seconds
        while time.time() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
                while self.pump(0.05):
                    pass
                break
            self.pump(min(0.05, deadline - time.time()))
        if self.status is None:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            return "EXIT killed"
        if os.WIFEXITED(self.status):
            return "EXIT %d" % os.WEXITSTATUS(self.status)
        return "EXIT signal %d" % os.WTERMSIG(self.status)


def main():
    args = sys.argv[1:]
    timeout, prompt_wait = 10.0, 5.0
    env = dict(os.environ, TERM="dumb")
    while args and args[0] != "--":
        opt = args.pop(0)
        if opt == "--timeout":
            timeout = float(args.pop(0))
        elif opt == "--prompt-wait":
            prompt_wait = float(args.pop(0))
        elif opt == "--env":
            key, _, value = args.pop(0).partition("=")
            env[key] = value
        else:
            sys.exit("pty.py: unknown option " + opt)
    if not args or len(args) < 2:
        sys.exit(__doc__)
    argv = args[1:]
    inputs = sys.stdin.read().splitlines()

    start = time.time()
    s = Session(argv, env)
    mark = 0
    for item in inputs:
        if time.time() - start > timeout:
            break
        if item.startswith("@sleep "):
            end = time.time() + float(item[7:])
            while time.time() < end and s.pump(end - time.time()):
                pass
            continue
        if item == "^C":
            mark = len(s.out)  # what follows waits for the prompt after it
            try:
                s.send(b"\x03")
            except OSError:
                break
            continue
        s.wait_prompt(mark, prompt_wait)  # on timeout, type anyway
        mark = len(s.out)
        if item == "^D":
            data = b"\x04"
        elif item.startswith("@type "):
            data = item[6:].encode()
        else:
            data = item.encode() + b"\r"
        try:
            s.send(data)
        except OSError:  # the child is gone
            break
    result = s.finish(max(1.0, timeout - (time.time() - start)))
    sys.stdout.write(clean(s.out).decode("utf-8", "replace"))
    sys.stdout.write("\n" + result + "\n")


if __name__ == "__main__":
    main()
