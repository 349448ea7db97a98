"""Offline RL datasets: load, validate and write HDF5 files and local Minari datasets.

Every problem with a dataset raises :class:`DatasetError` with one printable line naming the
source, the field and the shapes involved.
"""

from agile_offline.datasets.errors import DatasetError
from agile_offline.datasets.hdf5 import check_output_path, load_dataset, read_metadata, write_hdf5
from agile_offline.datasets.minari_io import (
    check_minari_id,
    load_minari,
    minari_metadata,
    minari_root,
    write_minari,
)
from agile_offline.datasets.spaces import check_spaces, describe_space
from agile_offline.datasets.transitions import TransitionData, from_arrays

__all__ = [
    "DatasetError",
    "TransitionData",
    "check_minari_id",
    "check_output_path",
    "check_spaces",
    "describe_space",
    "from_arrays",
    "load_dataset",
    "load_minari",
    "minari_metadata",
    "minari_root",
    "read_metadata",
    "write_hdf5",
    "write_minari",
]
