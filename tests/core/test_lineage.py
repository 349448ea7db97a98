"""Lineage records, JSON round trips and the family-tree table."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from agile_core.hpo.lineage import FamilyTree, Lineage, family_table


def test_child_records_parent_and_generation() -> None:
    parent = Lineage(id=3)
    parent.record(1, "mutation", kind="lr", old=0.1, new=0.2)
    child = parent.child(7, 2, selection="tournament")
    assert child.id == 7
    assert child.parent_id == 3
    assert child.generation_born == 2
    assert child.history == [
        {"generation": 2, "event": "clone", "parent_id": 3, "selection": "tournament"}
    ]
    assert child.last_event == "clone"
    assert parent.last_event == "mutation"
    assert len(parent.history) == 1


def test_self_parent_is_ignored_by_ancestors() -> None:
    tree = FamilyTree()
    tree.observe([Lineage(id=3).child(3, 1)])
    assert tree.ancestors(3) == []


def test_json_round_trip() -> None:
    lineage = Lineage(id=4, parent_id=1, generation_born=2)
    lineage.record(2, "clone", parent_id=1)
    lineage.record(3, "mutation", kind="arch", detail={"layer": 1})
    lineage.record(4, "migration", kind="weights", source_id=9)
    text = json.dumps(lineage.to_dict())
    restored = Lineage.from_dict(json.loads(text))
    assert restored == lineage
    restored.history[1]["detail"]["layer"] = 5
    assert lineage.history[1]["detail"]["layer"] == 1


def test_copy_is_independent() -> None:
    lineage = Lineage(id=1)
    lineage.record(0, "founder")
    duplicate = lineage.copy()
    duplicate.record(1, "mutation")
    assert len(lineage.history) == 1
    assert len(duplicate.history) == 2


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"id": 1, "colour": "red"}, "unknown lineage keys: colour"),
        ({"parent_id": 1}, "lacks the required key 'id'"),
        ({"id": "one"}, "Lineage.id must be an integer"),
        ({"id": 1, "generation_born": -1}, "Lineage.generation_born must be >= 0"),
        ({"id": 1, "history": [{"event": "clone"}]}, "entry 0 needs an integer 'generation'"),
        ({"id": 1, "history": [{"generation": 0}]}, "entry 0 needs a string 'event'"),
    ],
)
def test_from_dict_rejects_bad_data(data: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Lineage.from_dict(data)


@dataclass
class _Carrier:
    lineage: Lineage


def test_family_table_rows_last_occurrence_wins() -> None:
    root = Lineage(id=0)
    root.record(0, "founder")
    kid = root.child(5, 1)
    early = root.copy()
    root.record(2, "mutation", kind="lr")
    rows = family_table([early, _Carrier(kid), root])
    assert rows == [
        {"id": 0, "parent_id": None, "generation": 0, "last_event": "mutation"},
        {"id": 5, "parent_id": 0, "generation": 1, "last_event": "clone"},
    ]


def test_family_table_rejects_other_objects() -> None:
    with pytest.raises(TypeError, match="expected a Lineage"):
        family_table([object()])


def test_family_tree_across_generations() -> None:
    founders = [Lineage(id=i) for i in range(3)]
    tree = FamilyTree()
    tree.observe(founders, generation=0)
    gen1 = [founders[0], founders[0].child(3, 1), founders[2].child(4, 1)]
    tree.observe(gen1, generation=1)
    gen2 = [gen1[1], gen1[1].child(5, 2, event="migration", kind="whole"), gen1[2]]
    gen2[0].record(2, "mutation", kind="batch_size")
    tree.observe(gen2, generation=2)
    gen2[0].record(3, "mutation", kind="lr")  # after the snapshot: not recorded
    table = tree.table()
    assert [row["id"] for row in table] == [0, 1, 2, 3, 4, 5]
    by_id = {row["id"]: row for row in table}
    assert by_id[3] == {
        "id": 3,
        "parent_id": 0,
        "generation": 1,
        "last_event": "mutation",
        "last_seen": 2,
    }
    assert by_id[5]["last_event"] == "migration"
    assert by_id[1]["last_seen"] == 0
    assert tree.ancestors(5) == [3, 0]
    assert tree.ancestors(0) == []
    assert len(tree) == 6 and 4 in tree and 9 not in tree

    restored = FamilyTree.from_dict(json.loads(json.dumps(tree.to_dict())))
    assert restored.table() == table
    assert restored.get(3) == tree.get(3)
