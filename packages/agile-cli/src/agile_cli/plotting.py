"""Figures of a run directory: fitness, hyperparameter trajectories and the lineage tree.

Everything is read from the generation history that `agile train` writes
(``RUN_DIR/metrics.history.jsonl``, one JSON object per evaluated generation; see
``docs/run-directory.md``) plus the target score from ``manifest.resolved.json``. matplotlib is
imported only by :func:`plot_run`, with the non-interactive Agg backend.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HISTORY_FILE = "metrics.history.jsonl"
FIGURES = ("fitness.png", "hyperparameters.png", "lineage.png")

# Colours of lineage edges by mutation operator; `None` is a clone left unmutated.
OPERATOR_STYLE: dict[str | None, tuple[str, str]] = {
    None: ("#444444", "clone, not mutated"),
    "rl_hp_mut": ("#1f77b4", "clone + hyperparameter mutation"),
    "arch_mut": ("#ff7f0e", "clone + architecture mutation"),
    "params_mut": ("#2ca02c", "clone + weight noise"),
    "act_mut": ("#9467bd", "clone + activation mutation"),
}


class RunDirError(ValueError):
    """The path is not a run directory with a readable generation history."""


@dataclass
class RunHistory:
    """The generations of one run, oldest first, and what the plots annotate them with."""

    name: str
    generations: list[dict[str, Any]]
    target: float | None = None
    mutable: list[str] = field(default_factory=list)

    def predecessor(self, position: int, agent: dict[str, Any]) -> tuple[dict[str, Any], bool] | None:
        """The agent in the previous generation that `agent` (at `position`) continues.

        Returns (that agent, True) when the same agent survived, (its parent, False) for a clone,
        None for a founder or when the previous generation is not in the history."""
        if position == 0:
            return None
        previous = {a["id"]: a for a in self.generations[position - 1]["agents"]}
        if agent["id"] in previous:
            return previous[agent["id"]], True
        parent = agent.get("parent_id")
        if parent in previous:
            return previous[parent], False
        return None


def load_run(run_dir: str | Path) -> RunHistory:
    """Read a run directory's generation history; raise RunDirError with the reason otherwise."""
    root = Path(run_dir)
    if not root.is_dir():
        raise RunDirError(f"{root} is not a directory")
    path = root / HISTORY_FILE
    if not path.is_file():
        raise RunDirError(f"{root} is not an agile run directory: it has no {HISTORY_FILE} "
                          "(written by `agile train`)")
    by_generation: dict[int, dict[str, Any]] = {}
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RunDirError(f"{path}: not UTF-8 text (byte {exc.start}); the file is damaged") from None
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = _checked_record(json.loads(line))
            generation = record["generation"]
        except (ValueError, KeyError, TypeError) as exc:
            if number == len(lines) and not text.endswith("\n"):
                break  # the line a running (or crashed) run is still writing
            raise RunDirError(f"{path}:{number}: not a generation record ({exc})") from None
        by_generation[generation] = record
    if not by_generation:
        raise RunDirError(f"{path} records no generation yet (the run stopped before its first evaluation)")
    generations = [by_generation[g] for g in sorted(by_generation)]
    mutable: list[str] = []
    for record in generations:
        mutable.extend(name for name in record.get("mutable", []) if name not in mutable)
    return RunHistory(name=root.resolve().name, generations=generations, target=_target(root), mutable=mutable)


MAX_SLOTS = 100_000
"""Population slots a history may name (a larger slot is damage, and would size the plots)."""


def _integer(value: Any, name: str, low: int = 0, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value >= high):
        bounds = f">= {low}" if high is None else f"in {low}..{high - 1}"
        raise ValueError(f"{name} must be an integer {bounds}, got {value!r}")
    return value


def _checked_record(record: Any) -> dict[str, Any]:
    """A generation record whose fields have the types the plots read (ValueError/TypeError
    naming the first that does not). A fitness too large to scale is plotted as missing."""
    if not isinstance(record, dict):
        raise TypeError("a generation record is a JSON object")
    _integer(record["generation"], "generation")
    if not isinstance(record.get("step", 0), int | float) or isinstance(record.get("step", 0), bool):
        raise TypeError(f"step must be a number, got {record.get('step')!r}")
    agents = record["agents"]
    if not isinstance(agents, list):
        raise TypeError("agents is not a list")
    for index, agent in enumerate(agents):
        if not isinstance(agent, dict):
            raise TypeError(f"agents[{index}] is not an object")
        _integer(agent.get("slot", 0), f"agents[{index}].slot", 0, MAX_SLOTS)
        for key in ("id", "parent_id"):
            if isinstance(agent.get(key), list | dict):
                raise TypeError(f"agents[{index}].{key} must be a number or a name, got {agent.get(key)!r}")
        fitness = agent.get("fitness")
        if fitness is not None and (isinstance(fitness, bool) or not isinstance(fitness, int | float)):
            raise TypeError(f"agents[{index}].fitness must be a number or null, got {fitness!r}")
        if fitness is not None and not abs(fitness) <= PLOTTABLE:
            agent["fitness"] = None
        if not isinstance(agent.get("hyperparameters", {}), dict):
            raise TypeError(f"agents[{index}].hyperparameters is not an object")
    return record


PLOTTABLE = 1e100
"""Largest magnitude a plotted value may have (beyond it the axes cannot be scaled)."""


def _target(root: Path) -> float | None:
    try:
        manifest = json.loads((root / "manifest.resolved.json").read_text(encoding="utf-8"))
        target = manifest["training"]["target_score"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return float(target) if isinstance(target, int | float) else None


def plot_run(run_dir: str | Path, out_dir: str | Path | None = None) -> list[Path]:
    """Write the three figures of `run_dir` into `out_dir` (default ``RUN_DIR/plots``); return their paths."""
    history = load_run(run_dir)
    import matplotlib

    matplotlib.use("Agg")
    out = Path(out_dir) if out_dir is not None else Path(run_dir) / "plots"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(f"cannot write the figures to {out}: {exc.strerror or exc}") from None
    paths = [out / name for name in FIGURES]
    for draw, path in zip((plot_fitness, plot_hyperparameters, plot_lineage), paths, strict=True):
        draw(history, path)
    return paths


def _slot_colour(slot: int) -> Any:
    import matplotlib.pyplot as plt

    return plt.get_cmap("tab10")(slot % 10)


def _steps_axis(ax: Any, history: RunHistory) -> None:
    """A secondary x axis on top: population environment steps at each generation."""
    import numpy as np

    gens = [float(r["generation"]) for r in history.generations]
    steps = [min(float(r.get("step", 0)), PLOTTABLE) for r in history.generations]
    if len(gens) < 2 or any(b <= a for a, b in itertools.pairwise(steps)):
        return
    top = ax.secondary_xaxis("top", functions=(lambda g: np.interp(g, gens, steps),
                                               lambda s: np.interp(s, steps, gens)))
    top.set_xlabel("environment steps (whole population)")


def _trajectories(ax: Any, history: RunHistory, value: Any, jitter: float = 0.0) -> None:
    """Draw each agent's `value(agent)` per generation, joined to its predecessor's point.

    `jitter` shifts each slot sideways by that many generations so equal values stay visible."""
    slots = 1 + max((int(a.get("slot", 0)) for r in history.generations for a in r["agents"]), default=0)

    def x_of(generation: int, agent: dict[str, Any]) -> float:
        return generation + jitter * (int(agent.get("slot", 0)) - (slots - 1) / 2)

    from matplotlib.collections import LineCollection

    segments: dict[bool, list[Any]] = {True: [], False: []}
    colours: dict[bool, list[Any]] = {True: [], False: []}
    xs, ys, point_colours = [], [], []
    for position, record in enumerate(history.generations):
        for agent in record["agents"]:
            y = value(agent)
            if y is None:
                continue
            colour = _slot_colour(int(agent.get("slot", 0)))
            x = x_of(record["generation"], agent)
            link = history.predecessor(position, agent)
            if link is not None and value(link[0]) is not None:
                x0 = x_of(history.generations[position - 1]["generation"], link[0])
                segments[link[1]].append([(x0, value(link[0])), (x, y)])
                colours[link[1]].append(colour)
            xs.append(x)
            ys.append(y)
            point_colours.append(colour)
    for kept, style in ((True, "solid"), (False, "dashed")):  # one artist per kind: fast at any length
        if segments[kept]:
            ax.add_collection(LineCollection(segments[kept], colors=colours[kept], linestyles=style, alpha=0.55,
                                             linewidths=1.0, zorder=1))
    ax.scatter(xs, ys, c=point_colours, s=18 if len(xs) <= 2_000 else 4, zorder=2)


def _width(generations: int) -> float:
    """Figure width in inches: grows with the run, capped so long runs stay one readable image."""
    return min(max(8.0, 0.35 * generations), 16.0)


def _slot_handles(history: RunHistory) -> list[Any]:
    from matplotlib.lines import Line2D

    slots = 1 + max((int(a.get("slot", 0)) for r in history.generations for a in r["agents"]), default=0)
    return [Line2D([], [], color=_slot_colour(slot), marker="o", linestyle="-", label=f"slot {slot}")
            for slot in range(min(slots, 10))]


def _integer_ticks(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def plot_fitness(history: RunHistory, path: Path) -> None:
    """Fitness of every agent per generation, best and mean of the population, and the target."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    gens = [r["generation"] for r in history.generations]
    fitness = [[a["fitness"] for a in r["agents"] if a.get("fitness") is not None] for r in history.generations]
    fig, ax = plt.subplots(figsize=(_width(len(gens)), 5.0), layout="constrained")
    _trajectories(ax, history, lambda agent: agent.get("fitness"))
    best = [max(f) if f else math.nan for f in fitness]
    mean = [sum(f) / len(f) if f else math.nan for f in fitness]
    ax.plot(gens, best, color="black", linewidth=2.0, zorder=3)
    ax.plot(gens, mean, color="black", linewidth=1.2, linestyle=":", zorder=3)
    handles = [Line2D([], [], color="black", linewidth=2.0, label="best"),
               Line2D([], [], color="black", linewidth=1.2, linestyle=":", label="mean"),
               Line2D([], [], color="grey", linestyle="-", label="same agent, next generation"),
               Line2D([], [], color="grey", linestyle="--", label="clone of that agent"),
               *_slot_handles(history)]
    if history.target is not None:
        ax.axhline(history.target, color="red", linewidth=1.0, linestyle="--", zorder=0)
        handles.append(Line2D([], [], color="red", linestyle="--", label=f"target {history.target:g}"))
    ax.set_xlabel("generation")
    ax.set_ylabel("fitness (mean evaluation return)")
    ax.set_title(f"Fitness per generation: {history.name}")
    ax.grid(alpha=0.3)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, borderaxespad=0)
    _integer_ticks(ax)
    _steps_axis(ax, history)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _numeric(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if abs(value) <= PLOTTABLE else None


def hyperparameter_names(history: RunHistory) -> list[str]:
    """The mutable hyperparameters, or else the numeric ones that changed during the run."""
    if history.mutable:
        return list(history.mutable)
    seen: dict[str, set[float]] = {}
    for record in history.generations:
        for agent in record["agents"]:
            for name, value in agent.get("hyperparameters", {}).items():
                number = _numeric(value)
                if number is not None:
                    seen.setdefault(name, set()).add(number)
    return [name for name, values in seen.items() if len(values) > 1]


def plot_hyperparameters(history: RunHistory, path: Path) -> None:
    """One panel per mutable hyperparameter: every agent's value per generation along its lineage."""
    import matplotlib.pyplot as plt

    names = hyperparameter_names(history)
    width = _width(len(history.generations))
    fig, axes = plt.subplots(max(1, len(names)), 1, figsize=(width, 2.6 * max(1, len(names)) + 0.6),
                             sharex=True, squeeze=False, layout="constrained")
    if not names:
        axes[0][0].text(0.5, 0.5, "no mutable hyperparameters in this run", ha="center", va="center",
                        transform=axes[0][0].transAxes)
        axes[0][0].set_xlabel("generation")
    for ax, name in zip(axes[:, 0], names, strict=False):
        def value(agent: dict[str, Any], name: str = name) -> float | None:
            return _numeric(agent.get("hyperparameters", {}).get(name))

        _trajectories(ax, history, value, jitter=0.06)
        values = [v for r in history.generations for a in r["agents"] if (v := value(a)) is not None]
        if values and min(values) > 0 and max(values) / min(values) > 20:
            ax.set_yscale("log")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[-1][0].set_xlabel("generation")
    _integer_ticks(axes[-1][0])
    if names:
        axes[0][0].legend(handles=_slot_handles(history), loc="upper left", bbox_to_anchor=(1.01, 1.0),
                          fontsize=8, borderaxespad=0)
    fig.suptitle(f"Mutable hyperparameters per generation (solid: same agent, dashed: clone): {history.name}")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_lineage(history: RunHistory, path: Path) -> None:
    """The lineage tree: a node per agent and generation (x: generation, y: slot, colour: fitness,
    label: agent id); edges from each agent to the one it continues (dashed: the same agent kept)
    or was cloned from (an arrow coloured by the mutation applied; the mutation is written above
    the clone)."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import Normalize
    from matplotlib.lines import Line2D

    gens = history.generations
    if len(gens) > LINEAGE_DETAIL_LIMIT:
        _plot_lineage_summary(history, path)
        return
    slots = max((int(a.get("slot", 0)) for r in gens for a in r["agents"]), default=0) + 1
    fig, ax = plt.subplots(figsize=(min(max(8.0, 1.05 * len(gens) + 3), 40.0), max(4.0, 1.1 * slots + 2.2)),
                           layout="constrained")
    fitness = [a["fitness"] for r in gens for a in r["agents"] if a.get("fitness") is not None]
    norm = Normalize(min(fitness, default=0.0), max(fitness, default=1.0))
    cmap = plt.get_cmap("viridis")
    label_edges = len(gens) <= 40 and slots <= 12
    used: dict[str | None, tuple[str, str]] = {}
    for position, record in enumerate(gens):
        x = record["generation"]
        for agent in record["agents"]:
            y = int(agent.get("slot", 0))
            link = history.predecessor(position, agent)
            if link is not None:
                source, kept = link
                x0, y0 = gens[position - 1]["generation"], int(source.get("slot", 0))
                operator = None if kept else agent.get("operator")
                colour, meaning = OPERATOR_STYLE.get(operator, ("#d62728", f"clone + {operator}"))
                if kept:
                    ax.plot([x0, x], [y0, y], color="#aaaaaa", linestyle="--", linewidth=1.0, zorder=1)
                else:
                    used[operator] = (colour, meaning)
                    ax.annotate("", xy=(x, y), xytext=(x0, y0), zorder=1,
                                arrowprops={"arrowstyle": "-|>", "color": colour, "linewidth": 1.3,
                                            "shrinkA": 7, "shrinkB": 7})
                    text = agent.get("mutation")
                    if label_edges and text and text != "None":
                        ax.text(x, y - 0.27, _short(text), fontsize=6, color=colour, ha="center", va="bottom",
                                zorder=4, bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none",
                                                "alpha": 0.8})
            score = agent.get("fitness")
            elite = agent["id"] == record.get("elite_id")
            ax.scatter([x], [y], s=260, zorder=2, color=cmap(norm(score)) if score is not None else "#cccccc",
                       edgecolors="red" if elite else "black", linewidths=2.0 if elite else 0.6)
            ax.text(x, y, str(agent["id"]), fontsize=7, ha="center", va="center", zorder=3,
                    color="white" if score is not None and norm(score) < 0.6 else "black")
    handles = [Line2D([], [], color="#aaaaaa", linestyle="--", label="same agent kept (elite)")]
    handles += [Line2D([], [], color=c, linewidth=1.5, label=m) for c, m in used.values()]
    handles.append(Line2D([], [], marker="o", color="white", markeredgecolor="red", markeredgewidth=2,
                          markersize=10, label="elite of the generation"))
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 4), fontsize=8)
    fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, label="fitness")
    ax.set_yticks(range(slots))
    ax.set_ylim(slots - 0.5, -0.75)
    ax.set_ylabel("population slot")
    ax.set_xlabel("generation")
    if len(gens) <= 40:
        ax.set_xticks([r["generation"] for r in gens])
    ax.set_title(f"Lineage (node: agent id, colour: fitness): {history.name}")
    ax.grid(alpha=0.2)
    fig.savefig(path, dpi=110)
    plt.close(fig)


LINEAGE_DETAIL_LIMIT = 40
"""Generations up to which the lineage is drawn node by node; longer runs get the summary view."""


def _plot_lineage_summary(history: RunHistory, path: Path) -> None:
    """The lineage of a long run as one image: fitness per slot and generation (colour), the
    generation's elite (red dots) and each clone (white ticks), readable at any length."""
    import matplotlib.pyplot as plt
    import numpy as np

    gens = history.generations
    slots = max((int(a.get("slot", 0)) for r in gens for a in r["agents"]), default=0) + 1
    fitness = np.full((slots, len(gens)), np.nan)
    elite_x, elite_y, clone_x, clone_y = [], [], [], []
    for position, record in enumerate(gens):
        for agent in record["agents"]:
            slot = int(agent.get("slot", 0))
            if agent.get("fitness") is not None:
                fitness[slot, position] = agent["fitness"]
            if agent["id"] == record.get("elite_id"):
                elite_x.append(record["generation"])
                elite_y.append(slot)
            link = history.predecessor(position, agent)
            if link is not None and not link[1]:
                clone_x.append(record["generation"])
                clone_y.append(slot)
    first, last = gens[0]["generation"], gens[-1]["generation"]
    fig, ax = plt.subplots(figsize=(14.0, max(4.0, 0.35 * slots + 2.5)), layout="constrained")
    image = ax.imshow(fitness, aspect="auto", interpolation="nearest", cmap="viridis",
                      extent=(first - 0.5, last + 0.5, slots - 0.5, -0.5))
    ax.scatter(clone_x, clone_y, marker="|", s=30, color="white", linewidths=0.8, label="cloned from another agent")
    ax.scatter(elite_x, elite_y, marker="o", s=8, color="red", label="elite of the generation")
    fig.colorbar(image, ax=ax, label="fitness")
    fig.legend(loc="outside lower center", ncol=2, fontsize=8)
    ax.set_xlabel("generation")
    ax.set_ylabel("population slot")
    ax.set_yticks(range(slots) if slots <= 32 else np.linspace(0, slots - 1, 9).round().astype(int))
    ax.set_title(f"Lineage of {len(gens)} generations (colour: fitness): {history.name}")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _short(text: str, limit: int = 18) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
