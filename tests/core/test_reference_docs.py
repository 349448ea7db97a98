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
    from agile_core.reference import SECTIONS
    from agile_core.registry import paradigms

    models = [m for _, group in SECTIONS for m in group]
    models += [spec for p in paradigms().values() for spec in p.algorithms]
    missing = [f"{m.__name__}.{name}" for m in models for name, info in m.model_fields.items() if not info.description]
    assert missing == []
