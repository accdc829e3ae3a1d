"""What a transpiled program shows to Paddle's evaluation, export and fetch APIs.

``transpile`` rewrites a program in place: the ops an engine converted are gone, an
``ngraph_engine`` op runs them. Paddle's APIs that derive another program from it
would copy that op, which runs a training step and exists only in this process. So
``transpile`` keeps a copy of the program as it was (``remember``), and:

- ``Program.clone(for_test=True)`` (legacy programs; PIR programs have no ``for_test``)
  of a transpiled program clones the copy: a plain Paddle evaluation program over the
  same parameters, which the engines update in place in the scope;
- ``paddle.static.save_inference_model`` (and ``normalize_program``) given a transpiled
  program export from the copy: a plain Paddle inference model, no ``ngraph_engine`` op,
  that a process without paddle_ngraph loads with ``load_inference_model``;
- ``Executor.run`` refuses, naming it, a fetch of a value that only existed inside an
  engine segment. In PIR the user's handle to such a value points at an erased op and
  Paddle would crash on it; in a legacy program the variable is no longer written.

PIR values are matched by ``value.id``, the address of the value's storage, formatted
without reading it, so it is safe on the handle of an erased value (``hash(value)`` is the
Python wrapper's identity, different for each handle of one value). An address can be
reused by a value made later, hence an id counts as erased only if no op of the transpiled
program still defines it.

The hooks go in at the first ``transpile`` (Paddle is imported by then); with no
transpiled program they change nothing.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

from ..errors import ConfigError, ConversionError
from . import sharded_state


_GC_FLAG = "FLAGS_eager_delete_tensor_gb"


@dataclass
class Original:
    transpiled: object          # the program transpile rewrote (kept: its id is the registry key)
    copy: object                # a copy of that program as it was before the rewrite
    ir: str                     # "pir" or "legacy"
    values: dict = field(default_factory=dict)   # PIR: value.id -> the copy's value
    names: dict = field(default_factory=dict)    # PIR: value.id -> what made it, for messages
    erased: set = field(default_factory=set)     # PIR: ids of erased values; legacy: names no op writes
    config: object = None       # the Config it was transpiled with (elastic transpiles the copy again)
    nranks: int = 1             # the ranks it was transpiled for
    feeds: list = field(default_factory=list)    # the names every exe.run must feed
    collect_garbage: bool = True  # whether Paddle's executor frees values during a step (see paddle_held_values)


_ORIGINALS: dict[int, Original] = {}
_HOOKS: dict = {}


def remember(view) -> Original:
    """Copies the program before ``rewrite_*`` changes it; returns the record to complete after."""
    program = view.native
    if view.ir == "pir":
        import paddle

        mapping = paddle.pir.IrMapping()
        copy = program.clone(mapping)
        values, names = {}, {}
        for op in program.global_block().ops:
            for index, v in enumerate(op.results()):
                if v.initialized():
                    values[v.id] = mapping.look_up(v)
                    names[v.id] = _describe(op, index)
        original = Original(program, copy, "pir", values, names)
    else:
        original = Original(program, program.clone(), "legacy")
    install_hooks()
    return original


def complete(original: Original) -> None:
    """After the rewrite: notes what no longer exists, and registers the program."""
    if original.ir == "pir":
        live = _live_pir_values(original.transpiled)
        original.erased = set(original.values) - live
        original.feeds = _pir_feeds(original.transpiled)
        held = _pir_paddle_held_values(original.transpiled)
    else:
        written = {n for op in original.transpiled.global_block().ops for n in op.output_arg_names}
        before = {n for op in original.copy.global_block().ops for n in op.output_arg_names}
        block = original.transpiled.global_block()
        original.erased = {n for n in before - written if not (block.has_var(n) and block.var(n).persistable)}
        original.feeds = _legacy_feeds(original.transpiled)
        held = _legacy_paddle_held_values(original.transpiled)
    original.collect_garbage = held is None or held > MAX_VALUES_WITHOUT_GARBAGE_COLLECTION
    _ORIGINALS[id(original.transpiled)] = original


# Paddle's executor frees each value a step makes once its last reader ran (its garbage
# collector, when FLAGS_eager_delete_tensor_gb >= 0, as by default). On CPU each value freed wakes the
# collector's thread; on 2 vCPUs that costs tens of microseconds per value, more than the kernels of a
# small engine segment: about 0.1 ms of a 0.5 ms step of the word2vec model of tools/bench_small.py.
# A transpiled program whose Paddle ops make few values (the engines keep theirs in their own memory)
# runs without it: those few values stay allocated between steps, as a Paddle program without
# garbage collection keeps all of its values. Programs with control flow keep it (their sub-blocks'
# values are made per iteration).
MAX_VALUES_WITHOUT_GARBAGE_COLLECTION = 16
_NO_VALUES = {"pd_op.data", "builtin.parameter", "builtin.combine", "builtin.split", "builtin.slice",
              "pd_op.fetch", "builtin.shadow_output", "builtin.set_parameter"}


def without_garbage_collection(run, *args, **kwargs):
    """``run(*args, **kwargs)`` (an ``Executor.run``) with Paddle's garbage collection off. Paddle reads
    the flag when it builds a program's interpreter (at its first run, and for each new feed and
    fetch list): that program's, and any built during this call, run without it."""
    flags = _paddle_flags()
    previous = flags[_GC_FLAG]
    flags[_GC_FLAG] = -1.0
    try:
        return run(*args, **kwargs)
    finally:
        flags[_GC_FLAG] = previous


@functools.lru_cache(maxsize=None)
def _paddle_flags():
    """Paddle's flags, read and set in place (``paddle.set_flags`` costs 5 us a call)."""
    import paddle

    return paddle.base.core.globals()


def _pir_paddle_held_values(program) -> int | None:
    """How many values the program's ops make that Paddle's executor would free during a step (not
    persistable; feeds and parameters aside); None if it has control flow."""
    count = 0
    for op in program.global_block().ops:
        if op.num_regions():
            return None
        if op.name() in _NO_VALUES:
            continue
        for value in op.results():
            try:
                count += value.initialized() and not value.persistable
            except (RuntimeError, ValueError):  # a value of a type without the property
                count += 1
    return count


def _legacy_paddle_held_values(program) -> int | None:
    """The same for a legacy program: its non-persistable variables written by an op."""
    if program.num_blocks > 1:
        return None
    block = program.global_block()
    written = {n for op in block.ops if op.type not in ("feed", "fetch") for n in op.output_arg_names}
    return sum(1 for n in written if not (block.has_var(n) and block.var(n).persistable))


def _legacy_feeds(program) -> list[str]:
    """The data variables (``paddle.static.data``) that ops of the program read and none writes (a
    reader's ``read`` op writes those of a non-iterable DataLoader): what each ``exe.run`` feeds."""
    read, written = set(), set()
    for block in program.blocks:
        for op in block.ops:
            read.update(op.input_arg_names)
            written.update(op.output_arg_names)
    block = program.global_block()
    return sorted(n for n in read - written if block.has_var(n) and block.var(n).is_data)


def _pir_feeds(program) -> list[str]:
    """The names of the data and feed ops whose value is not persistable (the state an engine reads
    through a data op is): those Paddle's executor looks up in each ``exe.run``'s feed."""
    names = set()
    for op in program.global_block().ops:
        if op.name() in ("pd_op.data", "pd_op.feed") and not op.result(0).persistable:
            names.add(op.attrs()["name"])
    return sorted(names)


def check_feeds(original: Original, program, feed) -> None:
    """On several ranks, a feed this ``exe.run`` leaves out stops every rank, naming this rank and the
    variable. Paddle would refuse it on this rank alone before the engine runs (legacy: the engine
    operator's input is not initialized; PIR: a KeyError of its feed code), while the other ranks
    wait for this one at the step's input check until the watchdog ends the job: this rank meets
    them there instead (``Engine.refuse_step``)."""
    if feed is not None and not isinstance(feed, dict):
        return  # a list of feeds, one per place: Paddle's own checks
    given = [key if isinstance(key, str) else getattr(key, "name", str(key)) for key in (feed or {})]
    missing = [name for name in original.feeds if name not in given]
    if not missing:
        return
    from . import engines_of

    engines = engines_of(program)
    if not engines:
        return
    names = ", ".join(f"'{name}'" for name in missing)
    fed = ", ".join(f"'{name}'" for name in given) or "nothing"
    engines[0].refuse_step(f"feed {names} missing: the program reads {'them' if len(missing) > 1 else 'it'}, "
                           f"and this exe.run feeds {fed}")


def forget(program) -> None:
    entry = _ORIGINALS.get(id(program))
    if entry is not None and entry.transpiled is program:
        del _ORIGINALS[id(program)]


def original_of(program) -> Original | None:
    entry = _ORIGINALS.get(id(program))
    return entry if entry is not None and entry.transpiled is program else None


def _live_pir_values(program) -> set[int]:
    return {v.id for op in program.global_block().ops for v in op.results()}


# --- mapping what the user holds onto the copy ---------------------------------------------------
def _describe(op, index: int) -> str:
    """A PIR value by its maker: ``result 0 of pd_op.add (in /Linear_1/)``."""
    try:
        where = op.attrs().get("struct_name", "")
    except Exception:  # noqa: BLE001 - attributes Python cannot convert
        where = ""
    return f"result {index} of {op.name()}" + (f" (in {where})" if where else "")


def _value_name(value, original: Original | None = None) -> str:
    if original is not None and value.id in original.names:
        return original.names[value.id]
    try:
        return value.name
    except Exception:  # noqa: BLE001 - PIR values other than data and parameters have no name
        return "a value"


def _to_copy(original: Original, items, what: str) -> list:
    if original.ir == "legacy":
        block = original.copy.global_block()
        return [block.var(v if isinstance(v, str) else v.name) for v in items]
    mapped = []
    for v in items:
        copy = original.values.get(v.id)
        if copy is None:
            raise ConversionError(f"{what}: {_value_name(v)} is not a value of the program as it was when "
                                  f"paddle_ngraph.transpile rewrote it")
        mapped.append(copy)
    return mapped


def _flat(items) -> list:
    if items is None:
        return []
    if not isinstance(items, (list, tuple)):
        return [items]
    return [x for item in items for x in _flat(item)]


def check_fetch(original: Original, fetch_list) -> None:
    """Raises if ``fetch_list`` names a value that only existed inside an engine segment."""
    if not original.erased:
        return
    for item in _flat(fetch_list):
        if original.ir == "pir":
            if isinstance(item, str) or item.id not in original.erased:
                continue
            if item.id in _live_pir_values(original.transpiled):  # an address reused since
                continue
            name = _value_name(item, original)
        else:
            name = item if isinstance(item, str) else getattr(item, "name", None)
            if name not in original.erased:
                continue
        raise ConversionError(
            f"fetch_list: {name} is computed inside an ngraph_engine segment of this transpiled program and no "
            f"longer exists in it; name it when transpiling (paddle_ngraph.transpile(program, fetch_list=[...])) "
            f"so that the engine outputs it, or fetch it from an evaluation program cloned before transpile "
            f"(fleet's strategy.ngraph transpiles inside minimize, where no such list is given: clone before "
            f"minimize)")


def check_build_strategy(original: Original, build_strategy) -> None:
    """``CompiledProgram(program, build_strategy)`` with ``sync_batch_norm``: Paddle applies it as a
    graph pass when it compiles, which an engine never sees; on several ranks its batch norm would
    normalize with each rank's own statistics, where the user asked for the global batch's."""
    if (original.nranks > 1 and getattr(build_strategy, "sync_batch_norm", False)
            and not getattr(original.config, "sync_batch_norm", False)):
        raise ConfigError(
            f"CompiledProgram(build_strategy.sync_batch_norm=True) runs a program transpiled for {original.nranks} "
            f"ranks without sync_batch_norm: its batch norm would use each rank's own batch statistics; transpile "
            f"with sync_batch_norm=True (fleet: strategy.sync_batch_norm = True; DistributedStrategy.build_strategy "
            f"does not keep sync_batch_norm)")


def distinct_unused_slots(original: Original) -> None:
    """Before ``CompiledProgram`` builds its graph of a transpiled legacy program: each unused output
    slot of an engine op gets a variable of its own. They share one (rewrite.py: one value for
    Paddle's garbage collector to free), which Paddle's executor runs but its ``ir::Graph``
    refuses ("Variable ngraph_engine_N.unused occurs in output of ngraph_engine multiple times"),
    and a ``CompiledProgram`` is built as a graph (Paddle's test harness and fleet scripts run
    one). Done once, in place: the program then has more values, and Paddle's garbage collection
    for it is decided again."""
    from . import engine_op

    block = original.transpiled.global_block()
    changed = False
    for op in block.ops:
        if not engine_op.is_engine_op(op.type):
            continue
        seen = set()
        for slot in range(engine_op.OP_SLOTS.get(op.type.rpartition(".")[2], 0)):
            names = op.output(f"Out{slot}")
            if len(names) != 1:
                continue
            if names[0] in seen:
                own = f"{names[0]}.{slot}"
                if not block.has_var(own):
                    shared = block.var(names[0])
                    block.create_var(name=own, dtype=shared.dtype, shape=shared.shape)
                op.desc.set_output(f"Out{slot}", [own])
                changed = True
            seen.add(names[0])
    if changed:
        block._sync_with_cpp()
        held = _legacy_paddle_held_values(original.transpiled)
        original.collect_garbage = held is None or held > MAX_VALUES_WITHOUT_GARBAGE_COLLECTION


def check_reads_of_freed_state(program) -> None:
    """A program of Paddle's (not transpiled) reading optimizer state that ZeRO-1 freed in the scope
    (only the ranks' slices hold it between checkpoints) would fail in Paddle with "Tensor holds no
    memory", or save nothing true: a save program (``paddle.static.save``, fleet's
    ``save_persistables``, its sharding ``utils.save_persistables``) is the usual reader."""
    from paddle.base.framework import Program

    if not isinstance(program, Program):
        return  # a PIR program (ZeRO-1's state is freed the same way; its readers are not checked here)
    freed = sharded_state.freed_variables()
    if not freed:
        return
    for op in program.global_block().ops:
        for name in op.input_arg_names:
            if name in freed:
                raise _freed_state_error(f"op '{op.type}' of the program run reads", name, freed[name])


def check_saved_state_not_freed(program) -> None:
    """``paddle.static.save`` reads the scope itself, not through a program: a variable ZeRO-1 freed
    would be saved as an empty array, a checkpoint that loads without complaint."""
    from paddle.base.framework import Program

    freed = sharded_state.freed_variables()
    if not freed:
        return
    if isinstance(program, Program):
        names = [var.name for var in program.list_vars() if var.persistable]
    else:  # PIR: the scope variables its parameter and data ops name (optimizer state is read as data)
        names = [op.attrs().get("parameter_name") or op.attrs().get("name") for op in program.global_block().ops
                 if op.name() in ("builtin.parameter", "pd_op.data")]
    for name in names:
        if name in freed:
            raise _freed_state_error("paddle.static.save would save", name, freed[name])


def _freed_state_error(what: str, name: str, slice_name: str) -> ConfigError:
    return ConfigError(
        f"zero_stage 1: {what} the optimizer state '{name}', which between checkpoints only the ranks' slices "
        f"hold ('{slice_name}'; the full variable is freed in the scope); save with "
        f"paddle_ngraph.save_checkpoint(program, root, step) called on every rank, which gathers it "
        f"(paddle.static.save, fleet.save_persistables and fleet's sharding utils.save_persistables do not), or "
        f"train without zero_stage")


# --- the hooks ------------------------------------------------------------------------------------
def install_hooks() -> None:
    if _HOOKS:
        return
    import paddle
    from paddle.base import framework
    from paddle.static import io as static_io

    _HOOKS["clone"] = framework.Program.clone
    _HOOKS["run"] = paddle.static.Executor.run
    _HOOKS["save_inference_model"] = static_io.save_inference_model
    _HOOKS["normalize_program"] = static_io.normalize_program
    _HOOKS["save"] = static_io.save

    @functools.wraps(_HOOKS["clone"])
    def clone(self, for_test=False):
        original = original_of(self) if for_test else None
        if original is not None:
            return _HOOKS["clone"](original.copy, for_test=True)
        return _HOOKS["clone"](self, for_test=for_test)

    compiled_program = paddle.static.CompiledProgram
    _HOOKS["compiled_init"] = compiled_program.__init__

    @functools.wraps(_HOOKS["compiled_init"])
    def compiled_init(self, program_or_graph, *args, **kwargs):
        original = original_of(program_or_graph) if _ORIGINALS else None
        if original is not None and original.ir == "legacy":
            distinct_unused_slots(original)
        return _HOOKS["compiled_init"](self, program_or_graph, *args, **kwargs)

    compiled_program.__init__ = compiled_init

    @functools.wraps(_HOOKS["run"])
    def run(self, program=None, feed=None, fetch_list=None, *args, **kwargs):
        # A CompiledProgram runs the program it wraps (Paddle's fleet scripts run one): the same checks.
        inner = program._program if isinstance(program, compiled_program) else program
        original = original_of(inner) if _ORIGINALS and inner is not None else None
        if original is not None:
            check_fetch(original, fetch_list)
            # use_prune may cut the ops that read a feed: Paddle's own checks then.
            if original.nranks > 1 and original.feeds and not kwargs.get("use_prune", len(args) > 5 and args[5]):
                check_feeds(original, inner, feed)
            if inner is not program:
                check_build_strategy(original, program._build_strategy)
            if not original.collect_garbage:
                return without_garbage_collection(_HOOKS["run"], self, program, feed, fetch_list, *args, **kwargs)
        elif _ORIGINALS and inner is not None and sharded_state.LIVE:
            check_reads_of_freed_state(inner)
        return _HOOKS["run"](self, program, feed, fetch_list, *args, **kwargs)

    @functools.wraps(_HOOKS["save_inference_model"])
    def save_inference_model(path_prefix, feed_vars, fetch_vars, executor, **kwargs):
        program, feed_vars, fetch_vars = _untranspiled(kwargs.get("program"), feed_vars, fetch_vars,
                                                       "save_inference_model")
        if program is not None:
            kwargs["program"] = program
        return _HOOKS["save_inference_model"](path_prefix, feed_vars, fetch_vars, executor, **kwargs)

    @functools.wraps(_HOOKS["normalize_program"])
    def normalize_program(program, feed_vars, fetch_vars, **kwargs):
        copy, feed_vars, fetch_vars = _untranspiled(program, feed_vars, fetch_vars, "normalize_program")
        return _HOOKS["normalize_program"](copy if copy is not None else program, feed_vars, fetch_vars, **kwargs)

    @functools.wraps(_HOOKS["save"])
    def save(program, model_path, *args, **kwargs):
        if _ORIGINALS and sharded_state.LIVE:
            check_saved_state_not_freed(program)
        return _HOOKS["save"](program, model_path, *args, **kwargs)

    framework.Program.clone = clone
    paddle.static.Executor.run = run
    static_io.save_inference_model = save_inference_model
    static_io.normalize_program = normalize_program
    for module in (paddle.static, getattr(paddle.static, "io", None)):
        if module is not None and getattr(module, "save_inference_model", None) is _HOOKS["save_inference_model"]:
            module.save_inference_model = save_inference_model
        if module is not None and getattr(module, "normalize_program", None) is _HOOKS["normalize_program"]:
            module.normalize_program = normalize_program
        if module is not None and getattr(module, "save", None) is _HOOKS["save"]:
            module.save = save


def _untranspiled(program, feed_vars, fetch_vars, what: str):
    """(copy, feed_vars, fetch_vars) on the copy when ``program`` (default: the default main
    program) is transpiled, else (None, unchanged...)."""
    import paddle

    if program is None:
        program = paddle.static.default_main_program()
    original = original_of(program)
    if original is None:
        return None, feed_vars, fetch_vars
    single_feed = not isinstance(feed_vars, (list, tuple))
    single_fetch = not isinstance(fetch_vars, (list, tuple))
    feeds = _to_copy(original, _flat(feed_vars), f"{what} feed_vars")
    fetches = _to_copy(original, _flat(fetch_vars), f"{what} fetch_vars")
    return original.copy, feeds[0] if single_feed else feeds, fetches[0] if single_fetch else fetches
