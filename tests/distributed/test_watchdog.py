"""The stall report: who is missing and which collectives they owe, from the ranks' last positions."""
from paddle_ngraph.distributed.watchdog import Position, bucket_label, describe_missing

LABELS = [bucket_label(f"grads_{k}", [f"w{k}@GRAD", f"b{k}@GRAD"]) for k in range(4)]
NOW = 1000.0


def peer(step, phase="collectives", submitted=0, in_step=True, engine=1, age=0.1):
    return {"engine": engine, "step": step, "in_step": in_step, "phase": phase, "submitted": submitted,
            "time": NOW - age}


def test_ranks_that_submitted_the_blocked_bucket_are_not_missing():
    mine = Position(engine=1, step=5, in_step=True, phase="collectives", submitted=3, completed=1, labels=LABELS)
    peers = {1: peer(5, submitted=2), 2: peer(5, submitted=4), 3: peer(6, phase="input check"),
             4: peer(5, in_step=False, phase="idle")}
    assert describe_missing(mine, peers, NOW, interval=0.5) == []


def test_a_rank_behind_in_the_same_step_owes_the_buckets_from_its_position():
    mine = Position(engine=1, step=5, in_step=True, phase="collectives", submitted=4, completed=1, labels=LABELS)
    [line] = describe_missing(mine, {1: peer(5, submitted=1)}, NOW, interval=0.5)
    assert line.startswith("rank 1 (alive; in step 5, 1 of 4 collectives submitted)")
    assert line.endswith("not submitted: " + "; ".join(LABELS[1:4]))
    assert "bucket 'grads_1' (w1@GRAD, b1@GRAD)" in line


def test_a_silent_rank_a_step_behind_owes_the_input_check_and_every_submitted_bucket():
    mine = Position(engine=1, step=5, in_step=True, phase="collectives", submitted=2, completed=0, labels=LABELS)
    [line] = describe_missing(mine, {1: peer(4, in_step=False, phase="idle", age=12.0)}, NOW, interval=0.5)
    assert line.startswith("rank 1 (silent for 12.0 s: dead or frozen; its last report: between steps, last in step 4")
    assert line.endswith("not submitted: the input check of step 5; " + "; ".join(LABELS[:2]))


def test_a_rank_in_another_program_or_never_seen_is_missing():
    mine = Position(engine=1, step=0, in_step=True, phase="start-up sync", labels=[])
    lines = describe_missing(mine, {1: peer(7, engine=2), 2: None}, NOW, interval=0.5)
    assert lines[0].startswith("rank 1 (alive; inside step 7 of engine 2)")
    assert lines[0].endswith("not submitted: the start-up sync of step 0")
    assert lines[1].startswith("rank 2 (never reported")


def test_many_tensors_are_abbreviated():
    label = bucket_label("b", [f"t{k}" for k in range(10)])
    assert label == "bucket 'b' (t0, t1, t2, t3, ... (10 tensors))"
