"""The verifiers taskset package of codegym (id `codegym-taskset`): exactly one `vf.Taskset`."""

from codegym.verifiers import CodegymTaskset

__all__ = ["CodegymTaskset"]
