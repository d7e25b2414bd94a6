"""Where searches start on a device type: every shipped list fits its kernel's space, and a list
that names what the space lacks is a one-line error that says what."""

from __future__ import annotations

from importlib import resources
from typing import get_args

import pytest

from octune.catalogue.registry import available_kernels, kernel_from_texts, load_kernel
from octune.catalogue.space_schema import DeviceType
from octune.catalogue.starts import config_starts, parse_starts
from octune.core.errors import SpaceError

PARAMETERS = {"MWG": (16, 32, 64), "KWG": (8, 16), "SA": (0, 1)}


def test_every_shipped_start_is_a_whole_config_of_its_space():
    folder = resources.files("octune.search_spaces").joinpath("starts")
    shipped = sorted(
        p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml")
    )
    assert shipped, "no starts are shipped"
    for name in shipped:
        assert name in available_kernels(), f"starts/{name}.yaml names no kernel"
        kernel = load_kernel(name)
        listed = [config_starts(kernel, kind) for kind in get_args(DeviceType)]
        assert any(listed), f"starts/{name}.yaml lists nothing for any device type"
        for starts in listed:
            for config in starts:
                assert set(config) == set(kernel.space.parameter_names)
            assert len({tuple(sorted(c.items())) for c in starts}) == len(starts), "a start twice"


def test_a_kernel_whose_space_lacks_the_starts_values_starts_without_them():
    """A farm job's version of gemm whose MWG takes fewer values: the shipped starts do not
    fit it, and the search starts without them instead of stopping.
    """
    gemm = load_kernel("gemm")
    assert any(start["MWG"] == 64 for start in config_starts(gemm, "gpu"))
    text = gemm.space.source_text.replace(
        "MWG: {values: [16, 32, 64, 128, 256]", "MWG: {values: [16, 32]"
    )
    assert text != gemm.space.source_text
    assert config_starts(kernel_from_texts("gemm", gemm.source, text), "gpu") == []


def test_a_start_leaves_out_parameters_at_their_first_value():
    starts = parse_starts("gpu:\n  - {MWG: 64}\n  - {KWG: 16, SA: 1}\n", PARAMETERS, "x.yaml")
    assert starts == {"gpu": [{"MWG": 64, "KWG": 8, "SA": 0}, {"MWG": 16, "KWG": 16, "SA": 1}]}
    assert config_starts(load_kernel("gemm"), "no such type") == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpu:\n  - {MWG: 64, TILE: 2}\n", r"gpu\[0\] names 'TILE', which is no parameter"),
        ("gpu:\n  - {MWG: 48}\n", r"gpu\[0\]: MWG = 48 is none of its values \(16, 32, 64\)"),
        ("phone:\n  - {MWG: 64}\n", "phone"),
        ("gpu:\n  - {MWG: sixty}\n", "must be an integer"),
        ("gpu: [{MWG: 64}\n", "x.yaml"),
    ],
)
def test_a_bad_list_is_one_line_that_names_the_problem(text, message):
    with pytest.raises(SpaceError, match=message) as raised:
        parse_starts(text, PARAMETERS, "x.yaml")
    assert "\n" not in str(raised.value)
