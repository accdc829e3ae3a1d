"""``unsupported_ops`` plans for the ranks ``transpile`` would train on: a legacy sparse embedding's
selected-rows gradient and its SGD update stay with Paddle in one process, but on several ranks the
engine computes them dense (transpiler/sparse_gradients.py), so the ops left to Paddle differ.
Before, ``unsupported_ops`` always planned for one rank and, under ``mpirun -np 2``, named two ops
more than the plan ``transpile`` executed (found on Paddle's dist_ctr model). Here in one process:
the ``nranks`` keyword, and the default read from the launcher's environment (no rank is started;
the executed plan on 2 ranks is compared in tests/distributed/test_dp_unsupported_ops.py)."""
import paddle

import paddle_ngraph
from harness import ir_guard

import sparse_models as sm

SPARSE_OPS = {"lookup_table_v2_grad", "sgd"}


def sparse_program():
    with ir_guard("legacy"):
        main, _, _ = sm.build("sgd")
    return main


def types(reported):
    return {r["op_type"] for r in reported}


def test_one_process_leaves_the_sparse_gradient_and_update_to_paddle():
    reported = paddle_ngraph.unsupported_ops(sparse_program())
    assert SPARSE_OPS <= types(reported)
    assert {r["reason"] for r in reported if r["op_type"] in SPARSE_OPS} == {"variable kind"}


def test_nranks_keyword_plans_for_several_ranks():
    main = sparse_program()
    assert paddle_ngraph.unsupported_ops(main, nranks=2) == []
    # Asking for 2 ranks changes nothing of the program: one rank's answer is the same again.
    assert SPARSE_OPS <= types(paddle_ngraph.unsupported_ops(main, nranks=1))


def test_default_follows_the_launcher(monkeypatch):
    main = sparse_program()
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    assert paddle_ngraph.unsupported_ops(main) == []
    # The null transport is one process whatever the launcher says, as for transpile.
    assert SPARSE_OPS <= types(paddle_ngraph.unsupported_ops(main, transport="null"))
