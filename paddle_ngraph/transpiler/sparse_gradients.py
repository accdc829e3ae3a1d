"""Sparse embedding gradients on several ranks: computed dense, averaged, updated on the engine.

A legacy lookup with ``is_sparse=True`` (``paddle.static.nn.embedding``: ``lookup_table_v2`` or
``lookup_table``) makes its table's gradient as selected rows: one row per id of the batch. Paddle's
``sum`` concatenates them and its sparse update kernels apply them. The engine holds dense tensors
only, so in one process those ops stay with Paddle (the fallback), which trains as Paddle does. On
several ranks nothing could average such a gradient between Paddle's ops, so there it is computed
dense instead: the lookup's gradient as a scatter-add into a zero table, summed by the engine, then
averaged by the AllReduce pass and applied by the engine's update like any dense gradient.

That equals Paddle's one-process sparse training only where Paddle's update kernel for a selected-rows
gradient equals its dense kernel. Measured on Paddle 3.3.1, CPU, same program with is_sparse True
and False (a word2vec-like model, vocabulary 2074, batch 32, three lookups of one table):
- ``sgd``: equal (0 after 3 steps). A regularizer (L2Decay, L1Decay) adds its term to the selected
  rows with a ``sum`` whose output is dense, which Paddle's dense kernels then apply: every row
  decays in both forms, equal too (0).
- ``momentum`` (nesterov, ``l2_decay``): differs, 1e-4 after one step at lr 0.1: only 4 of the 96
  rows of the batch got their gradient, the others none. Its kernel (phi's ``SparseMomentumFunctor``)
  merges the rows without asking for them sorted, then finds each table row's gradient by a binary
  search over them. (With a few distinct small ids, where the merged rows come out sorted, it is
  equal: 0 with 12 ids of a vocabulary of 30.)
- ``adam`` with ``lazy_mode=True``: only the rows of the batch move; a dense gradient cannot say
  which rows those were on the other ranks. Differs.
- ``adam`` with ``lazy_mode=False``: its kernel (``adam_dense_param_sparse_grad``) advances the beta
  powers in place before its update reads them, so it corrects the bias with the next step's powers
  (and gives the rows absent from the batch an uncorrected epsilon): 0.0744 where its dense Adam
  moves 0.1 in the first step at lr 0.1. Differs.
- ``adamw``: Paddle's own run with a selected-rows gradient crashed (segmentation fault): nothing
  to be equal to.
So only the updates in ``EQUAL_UPDATES`` are served; any other op reading such a gradient (an
update above, a gradient clip's ``merge_selected_rows``, ...) is refused with a ``ConfigError``
naming the gradient, the op and why.

Paddle's sparse lookup gradient also keeps the rows of ``padding_idx`` ids, which its dense gradient
zeroes; the converter (frontend/converters/indexing.py) computes the dense form of the sparse one.

PIR needs none of this: ``paddle.nn.Embedding(sparse=True)`` in a PIR program gets a dense
``pd_op.embedding_grad`` from Paddle itself.
"""
from __future__ import annotations

from dataclasses import replace

from ..errors import ConfigError
from ..frontend.program_view import DENSE, normalize

SELECTED_ROWS = "selected_rows"
SPARSE_LOOKUP_GRADS = ("lookup_table_v2_grad", "lookup_table_grad")
# Updates whose Paddle kernel for a selected-rows gradient equals the dense one (measured, above).
EQUAL_UPDATES = ("sgd",)


def densify_sparse_gradients(view, nranks: int) -> list[str]:
    """On several ranks, the selected-rows gradients of sparse lookups (and their ``sum``) become
    dense variables of the view (``VarInfo.declared_kind`` keeps ``selected_rows``); returns their
    names. Raises ``ConfigError`` where an op reading one would then differ from Paddle's sparse
    training. In one process, or for PIR, nothing changes."""
    if nranks <= 1 or view.ir != "legacy":
        return []
    block0 = [op for op in view.ops if op.block == 0]
    table_of: dict[str, str] = {}  # gradient -> the table (parameter) it is the gradient of
    for op in block0:
        if op.type in SPARSE_LOOKUP_GRADS:
            table = next(iter(op.inputs.get(normalize("W"), ())), None)
            for name in op.outputs.get(normalize("W@GRAD"), ()):
                if name and table and _kind(view, name) == SELECTED_ROWS:
                    table_of[name] = table
        elif op.type == "sum":
            sparse_in = [n for n in op.input_names() if _kind(view, n) == SELECTED_ROWS]
            if sparse_in and all(n in table_of for n in sparse_in):
                for name in op.output_names():
                    if _kind(view, name) == SELECTED_ROWS:
                        table_of[name] = table_of[sparse_in[0]]
    if not table_of:
        return []
    for op in view.ops:
        for name in dict.fromkeys(op.input_names()):
            if name in table_of:
                why = _refusal(view, op, name, table_of)
                if why:
                    # Another optimizer helps only where the update is what differs (not a clip's reading).
                    other_optimizer = ", or SGD" if "grad" in op.inputs and name in op.inputs["grad"] else ""
                    raise ConfigError(
                        f"{op.location()}: the gradient '{name}' of the sparse embedding table '{table_of[name]}' "
                        f"(is_sparse=True: selected rows) is computed dense and averaged on {nranks} ranks, which "
                        f"equals Paddle's sparse training only for {', '.join(EQUAL_UPDATES)} updates; {why}. Use "
                        f"is_sparse=False (Paddle's dense training, which the engine runs on any number of ranks)"
                        f"{other_optimizer}")
    for name, table in table_of.items():
        info, weight = view.vars[name], view.vars[table]
        view.vars[name] = replace(info, kind=DENSE, dtype=weight.dtype, shape=tuple(weight.shape),
                                  declared_kind=info.kind)
    return list(table_of)


def _kind(view, name: str) -> str:
    info = view.vars.get(name)
    return info.kind if info is not None else DENSE


def _refusal(view, op, name: str, table_of: dict) -> str | None:
    """Why ``op`` reading the densified gradient ``name`` would not train as Paddle does; None if it would."""
    if op.block != 0 or op.control_flow:
        return f"op '{op.type}' reads it inside a sub-block, as selected rows"
    if op.type == "sum":
        outputs = op.output_names()
        if all(n in table_of or _kind(view, n) == DENSE for n in outputs):
            return None
        return "that sum also adds selected rows of another origin"
    is_update = "grad" in op.inputs and name in op.inputs["grad"]
    if is_update and op.type in EQUAL_UPDATES:
        return None
    if is_update and op.type == "momentum":
        return ("Paddle's CPU Momentum for a selected-rows gradient differs from its dense Momentum (it looks each "
                "table row up by a binary search over merged rows it did not sort, and rows of the batch it misses "
                "get no gradient)")
    if is_update and op.type in ("adam", "adamw"):
        if op.attrs.get(normalize("lazy_mode")):
            return (f"'{op.type}' with lazy_mode=True moves only the rows of the batch's ids, which a dense gradient "
                    f"averaged over the ranks cannot tell")
        if op.type == "adam":
            return ("Paddle's CPU Adam for a selected-rows gradient differs from its dense Adam (it corrects the bias "
                    "with the beta powers of the next step, and gives rows absent from the batch an uncorrected "
                    "epsilon)")
        return "Paddle's CPU AdamW for a selected-rows gradient has no dense equal to compare with (it crashes)"
    if is_update:
        return f"'{op.type}' is not one of them"
    return f"op '{op.type}' reads it as selected rows"
