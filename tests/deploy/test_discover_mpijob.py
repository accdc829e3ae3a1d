"""paddle_ngraph.elastic.discover_mpijob: the hostfile's workers whose sshd port answers, as host:slots."""
import socket
import subprocess
import sys

from paddle_ngraph.elastic.discover_mpijob import discover, read_hostfile
from paddle_ngraph.elastic.growth import parse_hosts


def test_lists_the_workers_that_answer_in_the_hostfiles_order(tmp_path):
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    port = listening.getsockname()[1]
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, not listening: connections to it are refused
    hostfile = tmp_path / "hostfile"
    # The operator's format; 127.0.0.2 answers on no port; a name that does not resolve (a pod not Ready).
    hostfile.write_text("localhost slots=2\n127.0.0.2 slots=1\njob-worker-9.job-worker.default.svc.invalid slots=4\n"
                        "# comment\n\n127.0.0.1\n")
    try:
        assert read_hostfile(str(hostfile)) == [("localhost", 2), ("127.0.0.2", 1),
                                                ("job-worker-9.job-worker.default.svc.invalid", 4), ("127.0.0.1", 1)]
        found = discover(str(hostfile), port, timeout=0.5)
        assert found == ["localhost:2", "127.0.0.1:1"]
        assert parse_hosts("\n".join(found), "test") == [("localhost", 2), ("127.0.0.1", 1)]  # elastic.run reads it
        assert discover(str(hostfile), closed.getsockname()[1], timeout=0.5) == []
        out = subprocess.run([sys.executable, "-m", "paddle_ngraph.elastic.discover_mpijob", "--hostfile",
                              str(hostfile), "--port", str(port), "--timeout", "0.5"], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0 and out.stdout.split() == ["localhost:2", "127.0.0.1:1"], out.stderr
    finally:
        listening.close()
        closed.close()
