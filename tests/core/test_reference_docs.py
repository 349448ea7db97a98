"""The manifest reference in docs/ is generated from the specs and must not go stale."""

from pathlib import Path

from agile_core.reference import manifest_reference_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "manifest-reference.md"


def test_manifest_reference_is_current():
    expected = manifest_reference_markdown()
    assert DOC.read_text() == expected, (
        "docs/manifest-reference.md is stale: run "
        "`uv run python -m agile_core.reference > docs/manifest-reference.md`"
    )


def test_every_spec_field_has_a_docstring():
    from agile_core.reference import SECTIONS, paradigm_network_specs
    from agile_core.registry import paradigms

    models = [m for _, group in SECTIONS for m in group]
    models += [m for _, group in paradigm_network_specs() for m in group]
    models += [spec for p in paradigms().values() for spec in p.algorithms]
    missing = [f"{m.__name__}.{name}" for m in models for name, info in m.model_fields.items() if not info.description]
    assert missing == []


def test_paradigm_network_specs_are_documented_in_the_network_section():
    """A paradigm's own `network` spec (and the models it nests) is documented from the spec the
    paradigm registers, under the `network` heading."""
    from agile_core.reference import paradigm_network_specs
    from agile_core.registry import paradigms

    text = manifest_reference_markdown()
    network = text[text.index("## `network`"):text.index("## `environment")]
    documented = {m for _, group in paradigm_network_specs() for m in group}
    for paradigm in paradigms().values():
        spec = paradigm.network_spec
        assert f"### `{spec.__name__}`" in network, paradigm.name
    for model in documented:
        assert f"### `{model.__name__}`" in network
