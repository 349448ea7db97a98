"""Re-laying out channels-last ``[H, W, C]`` image observations for agile's CNN encoder, which reads
``[C, H, W]``: the shared arithmetic of the Gymnasium wrappers
(:mod:`agile_core.environments.wrappers`) and the PettingZoo ones (``agile_marl.envs.wrappers``).

The transform acts on the trailing three axes, so the same function serves one observation
``[H, W, C]`` and a batch ``[N, H, W, C]``. In order: block-average `downsample` x `downsample`
pixel blocks (the image cropped to a multiple of the block), convert RGB to one luminance channel
(`grayscale`), move the channel axis first (`channels_first`). Integer images stay integer (rounded).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from gymnasium import spaces

__all__ = ["ImageLayout", "image_layout", "looks_channels_last"]

_LUMA = np.array([0.299, 0.587, 0.114])
"""ITU-R BT.601 luma weights of R, G and B."""


class ImageLayout:
    """A picklable transform of channels-last images, with the Box space of its results."""

    def __init__(self, space: spaces.Space, channels_first: bool = True, grayscale: bool = False,
                 downsample: int = 1) -> None:
        if not isinstance(space, spaces.Box) or len(space.shape) != 3:
            raise TypeError(f"image wrappers need a channels-last [H, W, C] Box observation space, got {space}")
        if isinstance(downsample, bool) or not isinstance(downsample, int) or downsample < 1:
            raise ValueError(f"downsample must be an integer >= 1, got {downsample!r}")
        height, width, channels = space.shape
        if downsample > min(height, width):
            raise ValueError(f"downsample={downsample} is larger than the {height}x{width} image")
        if grayscale and channels != 3:
            raise ValueError(f"grayscale needs 3 (RGB) channels, the observations have {channels}")
        self.channels_first = bool(channels_first)
        self.grayscale = bool(grayscale)
        self.downsample = downsample
        self.dtype = space.dtype
        self.space = spaces.Box(low=self(space.low), high=self(space.high), dtype=space.dtype)

    def __call__(self, images: np.ndarray) -> np.ndarray:
        """`images` ``[..., H, W, C]`` in the new layout."""
        array = np.asarray(images)
        integer = np.issubdtype(array.dtype, np.integer)
        work: np.ndarray = array
        if self.downsample > 1:
            k = self.downsample
            height, width, channels = array.shape[-3:]
            cropped = array[..., : height - height % k, : width - width % k, :]
            blocks = cropped.reshape(*array.shape[:-3], height // k, k, width // k, k, channels)
            work = blocks.mean(axis=(-4, -2))
        if self.grayscale:
            work = (work @ _LUMA)[..., None]
        if work is not array and integer:
            work = np.clip(np.rint(work), np.iinfo(array.dtype).min, np.iinfo(array.dtype).max)
        if work is not array:
            work = work.astype(array.dtype)
        if self.channels_first:
            work = np.moveaxis(work, -1, -3)
        return np.ascontiguousarray(work)


def image_layout(space: spaces.Space, *, channels_first: bool = True, grayscale: bool = False,
                 downsample: int = 1) -> tuple[spaces.Box, Callable[[np.ndarray], np.ndarray]]:
    """The observation space and the transform of channels-last images of `space` (a 3-D Box)."""
    layout = ImageLayout(space, channels_first, grayscale, downsample)
    return layout.space, layout


def looks_channels_last(space: spaces.Space) -> bool:
    """Whether `space` looks like ``[H, W, C]`` images: a 3-D uint8 Box whose last axis (1, 3 or 4
    channels) is smaller than the other two. Agile's CNN encoder reads ``[C, H, W]``."""
    if not isinstance(space, spaces.Box) or len(space.shape) != 3 or space.dtype != np.uint8:
        return False
    height, width, channels = space.shape
    return channels in (1, 3, 4) and min(height, width) > channels
