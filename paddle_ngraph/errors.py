"""The typed errors of paddle_ngraph.

Every error names what it is about: the op, the variable, the file or the rank.
They share one base class so that a caller can catch everything we raise.
"""


class NgraphError(Exception):
    """Base class of every error paddle_ngraph raises on purpose."""


class ValidationError(NgraphError):
    """A graph node whose inputs or attributes are invalid; names the node."""


class ConversionError(NgraphError):
    """A Paddle op that could not be converted; names the op and its location."""


class RefusedOpError(ConversionError):
    """A converter that cannot convert this op as it is (an attribute value, a dynamic dimension, a
    dtype it does not handle); names the op, its location and why. With fallback the op stays
    with Paddle; any other exception in a converter is a bug and is raised, naming the op."""


class UnsupportedOpsError(ConversionError):
    """One or more Paddle op types the engine does not run (no converter, or, where the entries
    say why, the segment plan's reason). Lists all of them at once."""

    def __init__(self, unsupported):
        self.unsupported = list(unsupported)
        lines = [f"{len(self.unsupported)} unsupported Paddle op type(s):"]
        for entry in self.unsupported:
            why = f": {entry['reason']} ({entry['detail']})" if entry.get("reason") else ""
            lines.append(
                f"  {entry['op_type']} x{entry['count']}, first at block {entry['block']} "
                f"op {entry['op_index']} (outputs: {', '.join(entry['outputs']) or '-'}){why}"
            )
        super().__init__("\n".join(lines))


class RegistrationError(NgraphError, RuntimeError):
    """A converter or kernel registered twice for one op type; names both. A RuntimeError too: it
    is a programming error of whoever registers, raised at import."""


class ProgramFileError(NgraphError):
    """A saved program that cannot be read; names the file and what is wrong."""


class SerializationError(NgraphError):
    """An IR JSON document that cannot be read back."""


class ExecutionError(NgraphError):
    """A failure while executing a node; names the node."""


class TransportError(NgraphError):
    """A collective that failed; names the rank, tensor and dtype."""


class ConfigError(NgraphError):
    """Bad configuration; lists the valid choices."""


class PaddleVersionError(NgraphError, ImportError):
    """The installed Paddle is not the one paddle_ngraph was built against; names both versions.

    Also an ImportError: it is raised by ``import paddle_ngraph``, and code that treats
    paddle_ngraph as optional (``try: import paddle_ngraph except ImportError``) should see it so."""


class UnknownConfigKeyError(ConfigError, TypeError):
    """A configuration key (or ``transpile`` keyword) that does not exist; lists the valid keys.
    A TypeError too, as Python's own error for an unexpected keyword argument is."""


class RankLostError(TransportError):
    """A collective that failed because a rank of the group died (MPI's ULFM reported the process
    failure, or another survivor revoked the communicator); names the lost ranks where known.
    ``paddle_ngraph.elastic.run`` recovers from it; without elastic it ends the job as any failure."""


class TooFewRanksError(NgraphError):
    """An elastic job whose survivors are fewer than its minimum: raised on every survivor, after
    the last commit was written to disk (names the ranks left, the minimum and the checkpoint)."""
