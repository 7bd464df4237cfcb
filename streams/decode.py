"""Telemetry v1 decoded in one pass: msgspec structs made from the pydantic contract, field for field.

``gpufleet/contracts/telemetry.py`` is the contract: pydantic models whose validation errors name the field path
(``gpus.3.util_pct: Input should be less than or equal to 100``), and what the dead-letter topic says. The
stream decodes every message once, so the decoder is on the hot path: pydantic takes about as long as
``json.loads`` of the same bytes, msgspec a quarter of that (two fifths with the names shared, below); a
message waiting for the watermark is packed (:func:`pack_message`, a quarter of its JSON with its strings
numbered in the node's :class:`Strings`, a tenth once compressed with LZ4) and unpacked when it is released.
The structs here are built from the pydantic models themselves (names, aliases, types, bounds, defaults;
every float finite, as ``allow_inf_nan=False`` asks), so the two cannot drift apart, and the models' own
rules (memory used within the total, no GPU twice) are checked after decoding.

msgspec is the stricter of the two: it refuses a ``true`` or a ``"1.5"`` where a number is due, a ``3.0``
where an integer is, which pydantic's lax mode takes. Whatever msgspec refuses, or a rule fails on, is
decided again by the pydantic model: it raises the contract's :class:`TelemetryError`, worded as always, or
accepts, and its values are carried over into the structs. Both paths give the same message for the same
input (``tests/unit/test_decode.py`` holds them to it over thousands of mutated messages).

The structs answer what the stream reads of a message (attributes by the contract's names, ``to_json``,
``to_dict``, ``with_gpus``); a pydantic :class:`~gpufleet.contracts.telemetry.Telemetry` given to the
stream directly works the same way.
"""
from __future__ import annotations

import sys
import types
import typing
from typing import Annotated, Any, Union

import msgspec
from cramjam import lz4 as _lz4
from msgspec.structs import astuple, force_setattr
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from gpufleet.contracts import telemetry as contract
from gpufleet.contracts.telemetry import MAX_MESSAGE_BYTES, TelemetryError

_FINITE = sys.float_info.max
_BOUNDS = ("ge", "gt", "le", "lt", "min_length", "max_length")      # annotated_types' Ge, Gt, ... MaxLen


def _meta(constraints) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c in constraints:
        if c is contract.NotBool:            # msgspec never takes a bool for a number
            continue
        if isinstance(c, FieldInfo):
            out.update(_meta(c.metadata))
        elif len(bound := [b for b in _BOUNDS if hasattr(c, b)]) == 1:
            out[bound[0]] = getattr(c, bound[0])
        else:
            raise TypeError(f"telemetry contract: no msgspec equivalent for {c!r}")
    return out


def _type(tp, constraints=(), packed: bool = False) -> Any:
    """The msgspec type of a pydantic annotation (its bounds as ``Meta``; floats bounded to be finite).
    ``packed``: the type of a packed message's field, without bounds (it was validated before it was packed)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:
        return _type(args[0], (*constraints, *args[1:]), packed)
    bounds = {} if packed else _meta(constraints)
    if origin in (Union, types.UnionType):
        assert not bounds
        return Union[tuple(_type(a, (), packed) for a in args)]   # noqa: UP007 (built from a tuple)
    if origin is list:
        inner = list[_type(args[0], (), packed)]          # type: ignore[misc,valid-type]
        return Annotated[inner, msgspec.Meta(**bounds)] if bounds else inner
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return (PACKED if packed else STRUCTS)[tp]
    if packed:
        return Union[str, int] if tp is str else tp     # noqa: UP007 -- a string, or its number in a Strings table
    if tp is float:                          # finite only (a dict may hold nan or inf; JSON cannot)
        if "ge" not in bounds and "gt" not in bounds:
            bounds["ge"] = -_FINITE
        if "le" not in bounds and "lt" not in bounds:
            bounds["le"] = _FINITE
    return Annotated[tp, msgspec.Meta(**bounds)] if bounds else tp


def _to_json(self) -> str:
    return _ENCODER.encode(self).decode()


def _to_dict(self) -> dict:
    return msgspec.to_builtins(self)


def _unpacked(self):
    """A packed struct as the plain one (its fields by the contract's names again)."""
    return msgspec.convert(self, _PLAIN[type(self)], from_attributes=True)


def _packed_to_json(self) -> str:
    return _to_json(_unpacked(self))


def _packed_to_dict(self) -> dict:
    return _to_dict(_unpacked(self))


def _struct(model: type[BaseModel], packed: bool = False) -> type[msgspec.Struct]:
    fields = []
    for name, f in model.model_fields.items():
        tp = _type(f.annotation, f.metadata, packed)
        if f.is_required():
            default: Any = msgspec.NODEFAULT
        elif f.default == []:
            default = msgspec.field(default_factory=list)
        else:
            default = f.default
        fields.append((name, tp, msgspec.field(default=default, name=f.alias) if f.alias and not packed
                       else default))
    if packed:
        namespace = {"to_json": _packed_to_json, "to_dict": _packed_to_dict,
                     "__doc__": f"{model.__doc__} (packed while it waits)"}
        return msgspec.defstruct(model.__name__, fields, bases=(STRUCTS[model],), array_like=True, kw_only=True,
                                 frozen=True, namespace=namespace, module=__name__)
    namespace = {"to_json": _to_json, "to_dict": _to_dict, "__doc__": f"{model.__doc__} (decoded by msgspec)"}
    return msgspec.defstruct(model.__name__, fields, kw_only=True, frozen=True, namespace=namespace,
                             module=__name__)


STRUCTS: dict[type[BaseModel], type[msgspec.Struct]] = {}
PACKED: dict[type[BaseModel], type[msgspec.Struct]] = {}
for _model in (contract.Process, contract.Host, contract.Gpu, contract.Telemetry):     # the nested ones first
    STRUCTS[_model] = _struct(_model)
    PACKED[_model] = _struct(_model, packed=True)
_PLAIN = {PACKED[m]: STRUCTS[m] for m in STRUCTS}
Process, Host, Gpu, Telemetry = (STRUCTS[m] for m in (contract.Process, contract.Host, contract.Gpu,
                                                       contract.Telemetry))

_DECODER = msgspec.json.Decoder(Telemetry)
_ENCODER = msgspec.json.Encoder()
_PACK = msgspec.msgpack.Encoder()
_UNPACK = msgspec.msgpack.Decoder(PACKED[contract.Telemetry])


def _rules_hold(msg) -> bool:
    """The pydantic models' own rules (their ``model_validator``s), on a decoded message."""
    h = msg.host
    if h is not None and h.mem_used_bytes is not None and h.mem_total_bytes is not None \
            and h.mem_used_bytes > h.mem_total_bytes:
        return False
    for g in msg.gpus:
        if g.mem_used_bytes is not None and g.mem_total_bytes is not None and g.mem_used_bytes > g.mem_total_bytes:
            return False
    return len(msg.gpus) < 2 or len({g.uuid for g in msg.gpus}) == len(msg.gpus)


class _Names:
    """One string object per name: the node, its pool, each GPU's uuid, model, tenant and job repeat in every
    message, and the processors' state keeps them (a window holds a job name per sample). pydantic shares
    repeated strings as it parses (a cache of its own); msgspec makes each anew. This is a cache of the same
    kind: direct-mapped by the string's hash, a fixed number of slots (a name whose slot another took is kept
    as it came, nothing grows), so a worker's memory stays bounded however many names pass through it."""

    SLOTS = 1 << 18

    def __init__(self) -> None:
        self.slots: list[str | None] = [None] * self.SLOTS

    def share(self, msg) -> None:
        slots, mask = self.slots, self.SLOTS - 1
        for obj, names in ((msg, _MESSAGE_NAMES), *((g, _GPU_NAMES) for g in msg.gpus)):
            for name in names:
                value = getattr(obj, name)
                if value is None:
                    continue
                at = hash(value) & mask
                known = slots[at]
                if known == value:
                    force_setattr(obj, name, known)
                else:
                    slots[at] = value

    def one(self, value: str) -> str:
        """The shared string equal to ``value`` (``value`` itself, now shared, if none was)."""
        at = hash(value) & (self.SLOTS - 1)
        known = self.slots[at]
        if known == value:
            return known
        self.slots[at] = value
        return value


_MESSAGE_NAMES = ("node", "pool")
_GPU_NAMES = ("uuid", "model", "tenant", "job")
_NAMES = _Names()


def decode(data: str | bytes | dict, share_names: bool = True) -> Any:
    """One telemetry message (JSON text, bytes, or a decoded dict) as structs; raises the contract's
    :class:`TelemetryError`, with the pydantic model's reason, for an invalid one. ``share_names=False`` for a
    message that only passes the event-time gate (it waits packed, its names shared when it is unpacked)."""
    try:
        if isinstance(data, dict):
            msg = msgspec.convert(data, Telemetry)
        elif len(data) > MAX_MESSAGE_BYTES:
            raise TelemetryError(f"message of {len(data)} bytes exceeds {MAX_MESSAGE_BYTES}", "too_large")
        else:
            msg = _DECODER.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        msg = None                               # pydantic decides, and words the reason
    if msg is None or not _rules_hold(msg):
        msg = convert(contract.parse(data))      # raises with the contract's reason, or lax input accepted
    if share_names:
        _NAMES.share(msg)
    return msg


def _holds(tp) -> tuple[bool, bool]:
    """Whether a field's type holds a struct, and whether a list of them."""
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return True, False
    inner = [_holds(a) for a in typing.get_args(tp)]
    struct = any(s for s, _ in inner)
    return struct, struct and (typing.get_origin(tp) is list or any(many for _, many in inner))


def _nested(cls: type[msgspec.Struct]) -> tuple[tuple[int, bool], ...]:
    """The positions of a struct's fields that hold structs: (index, a list of them)."""
    return tuple((i, many) for i, f in enumerate(msgspec.structs.fields(cls)) for struct, many in [_holds(f.type)]
                 if struct)


def _texts(packed: type[msgspec.Struct]) -> tuple[int, ...]:
    """The positions of a packed struct's string fields (a string or its number, or None)."""
    return tuple(i for i, f in enumerate(msgspec.structs.fields(packed)) if str in typing.get_args(f.type))


_NESTED = {cls: _nested(cls) for cls in (*STRUCTS.values(), *PACKED.values())}
_TEXTS = {cls: _texts(PACKED[model]) for model in STRUCTS for cls in (STRUCTS[model], PACKED[model])}


class Strings:
    """A node's strings, numbered, for its messages that wait packed: a GPU's uuid and model, its tenant and job,
    the node's own names repeat in every message (a third of a packed GPU sample), so a packed message holds
    their numbers in this table instead. The table a message was packed with unpacks it; a full table gives way
    to a new one for the messages after it (those waiting keep theirs), so it stays small however many jobs a
    node runs."""

    __slots__ = ("numbers", "names")
    LIMIT = 1024

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}
        self.names: list[str] = []

    def number(self, name: str) -> int:
        n = self.numbers.get(name)
        if n is None:
            n = self.numbers[name] = len(self.names)
            self.names.append(_NAMES.one(name))        # shared, as a decoded message's names are
        return n

    def full(self) -> bool:
        return len(self.names) >= self.LIMIT


def _values(obj, strings: Strings | None = None) -> Any:
    """A struct's field values in order, its nested structs likewise: what a packed struct decodes from
    (its strings as their numbers in ``strings``, if given)."""
    cls = type(obj)
    nested, texts = _NESTED[cls], _TEXTS[cls] if strings is not None else ()
    if not nested and not texts:
        return astuple(obj)
    values = list(astuple(obj))
    for i in texts:
        v = values[i]
        if v is not None:
            values[i] = strings.number(v)     # type: ignore[union-attr]
    for i, many in nested:
        v = values[i]
        if v:
            values[i] = [_values(x, strings) for x in v] if many else _values(v, strings)
    return values


def _restore(obj, names: list[str]) -> None:
    """A packed struct's strings back from their numbers."""
    cls = type(obj)
    fields = cls.__struct_fields__
    for i in _TEXTS[cls]:
        v = getattr(obj, fields[i])
        if type(v) is int:
            force_setattr(obj, fields[i], names[v])
    for i, many in _NESTED[cls]:
        v = getattr(obj, fields[i])
        if v:
            for x in (v if many else (v,)):
                _restore(x, names)


def pack_message(msg, strings: Strings | None = None) -> bytes:
    """A decoded message as compact bytes while it waits for the watermark: its values in field order
    (MessagePack), without the field names, about a third of its JSON; with ``strings``, its strings as their
    numbers there, about a quarter; then compressed with LZ4 (a block), a tenth of its JSON for a collector's
    message. :func:`unpack_message` (with the same table) gives it back."""
    return bytes(_lz4.compress_block(_PACK.encode(_values(msg, strings))))


def unpack_message(data: bytes, strings: Strings | None = None) -> Any:
    """A message from :func:`pack_message`, its names shared: the same fields and values as the message packed, as
    the packed twin of its struct (a subclass: attributes, ``to_json`` and ``to_dict`` answer the same)."""
    msg = _UNPACK.decode(_lz4.decompress_block(data))
    if strings is not None:
        _restore(msg, strings.names)      # the table's names are shared already
    else:
        _NAMES.share(msg)
    return msg


def convert(model: contract.Telemetry) -> Any:
    """A pydantic message as structs (what the contract accepted, carried over as it is)."""
    return msgspec.convert(model.model_dump(by_alias=True), Telemetry)


def with_gpus(msg: Any, gpus: list) -> Any:
    """The message with these GPUs (a struct or a pydantic model, as given)."""
    if isinstance(msg, BaseModel):
        return msg.model_copy(update={"gpus": gpus})
    return msgspec.structs.replace(msg, gpus=gpus)
