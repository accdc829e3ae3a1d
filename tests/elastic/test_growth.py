"""Where new ranks go: the discovery's lines, and the room on each host beside the group's ranks."""
import os
import socket
import types

import pytest

from paddle_ngraph.elastic import run
from paddle_ngraph.elastic.growth import Growth, parse_hosts
from paddle_ngraph.errors import ConfigError


def _group(hosts, rank=0):
    """What ``Growth.placement`` reads of a transport: the members' hosts and this rank."""
    return types.SimpleNamespace(hosts=list(hosts), rank=rank, size=len(hosts))


def test_parse_hosts_reads_horovods_lines():
    text = "# hosts\nnode-a:4\n\nnode-b   # one slot\nnode-a:2\n"
    assert parse_hosts(text, "script") == [("node-a", 4), ("node-b", 1)]


@pytest.mark.parametrize("line", ["node-a:x", ":3", "node-a:-1"])
def test_parse_hosts_names_a_bad_line(line):
    with pytest.raises(ConfigError, match=f"line 2: '{line}'"):
        parse_hosts(f"ok:1\n{line}\n", "discover.sh")


def test_placement_fills_the_room_each_host_has_up_to_max_ranks():
    growth = Growth(5, lambda: ["node-a:2", "node-b:2", "node-c:4"], interval=0)
    assert growth.placement(_group(["node-a", "node-b"])) == [("node-a", 1), ("node-b", 1), ("node-c", 1)]


def test_placement_counts_localhost_as_the_host_of_rank_0():
    growth = Growth(4, lambda: "localhost:3\n", interval=0)
    here = "node-x"
    assert growth.placement(_group([here, here])) == [(here, 1)]


def test_placement_runs_discovery_at_most_every_interval():
    calls = []

    def discover():
        calls.append(1)
        return ["node-a:3"]

    growth = Growth(3, discover, interval=3600)
    group = _group(["node-a", "node-a"])
    assert growth.placement(group) == [("node-a", 1)]
    assert growth.placement(group) == []  # within the interval: not asked again
    assert len(calls) == 1
    assert Growth(2, discover, interval=0).placement(group) == []  # at max_ranks: not asked at all
    assert len(calls) == 1


def test_a_failing_discovery_script_leaves_the_group_as_it_is(tmp_path, caplog):
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho 'no cluster API' >&2\nexit 3\n")
    script.chmod(0o755)
    growth = Growth(4, str(script), interval=0)
    assert growth.placement(_group([socket.gethostname()])) == []
    assert "exited with 3: no cluster API" in caplog.text


def test_a_discovery_script_is_run_and_read(tmp_path):
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho node-a:2\necho node-b:1\n")
    script.chmod(0o755)
    assert Growth(3, os.fspath(script), interval=0).discover() == [("node-a", 2), ("node-b", 1)]


def test_run_wants_max_ranks_and_discovery_together():
    with pytest.raises(ConfigError, match="both max_ranks and discovery"):
        run(lambda state: None, max_ranks=3)
    with pytest.raises(ConfigError, match="max_ranks=1 is below min_ranks=2"):
        run(lambda state: None, min_ranks=2, max_ranks=1, discovery="discover.sh")


def test_placement_matches_full_and_short_host_names():
    """MPI_Get_processor_name says "worker-0" where discovery lists the pod's full DNS name."""
    growth = Growth(4, lambda: ["worker-0.job.default.svc:2", "worker-1.job.default.svc:2"], interval=0)
    assert growth.placement(_group(["worker-0", "worker-0", "worker-1"])) == [("worker-1.job.default.svc", 1)]
