"""Imports torch 1.13's distributed checkpoint on Python 3.11.

torch 1.13 predates Python 3.11, whose dataclasses reject an unhashable
default (ShardedTensorMetadata.tensor_properties = TensorProperties()).
Before the import, wrap such defaults in a default_factory returning the
same object, which is what 1.13 meant; nothing else changes.
"""
import dataclasses

_process_class = dataclasses._process_class


def _tolerant(cls, *args, **kwargs):
    for name in cls.__dict__.get("__annotations__", {}):
        value = cls.__dict__.get(name, dataclasses.MISSING)
        field = value if isinstance(value, dataclasses.Field) else None
        default = field.default if field is not None else value
        if default is dataclasses.MISSING or type(default).__hash__ is not None:
            continue
        factory = (lambda d=default: d)
        if field is not None:
            field.default, field.default_factory = dataclasses.MISSING, factory
        else:
            setattr(cls, name, dataclasses.field(default_factory=factory))
    return _process_class(cls, *args, **kwargs)


dataclasses._process_class = _tolerant
try:
    import torch.distributed._shard.checkpoint as dcp  # noqa: E402
    from torch.distributed._shard.checkpoint import metadata  # noqa: E402,F401
finally:
    dataclasses._process_class = _process_class
