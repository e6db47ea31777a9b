"""`--plugin dask_unknown_plugin`: `flaky.send` (see `dask_plugin.register_unknown`)."""

from dask_plugin import register_unknown as register

__all__ = ["register"]
