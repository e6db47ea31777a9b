"""`planloom tools`: the actions steps can use, their params, and this machine's
confinement layers."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from engine.app.loading import load
from engine.app.output import EXIT_OK, print_json
from engine.capability import Registry
from engine.redaction import Secrets
from engine.sanitize import neutralize


def main(args: argparse.Namespace, registry: Registry) -> int:
    if args.recipe is not None:
        loaded = load(args.recipe, registry, as_json=args.json)
        if isinstance(loaded, int):
            return loaded
        registry = registry.bind(loaded.capabilities, Path(args.recipe).resolve().parent)
    layers = {
        name: family.confinement() if family.confinement is not None else {}
        for name, family in registry.families.items()
    }
    rows: list[dict[str, Any]] = [
        {
            "name": tool.name,
            "family": tool.family,
            **tool.details,
            "description": tool.description,
            "side_effects": "per call" if tool.side_effects is None else tool.side_effects,
            "params": tool.params,
            "output": tool.output,
            "grant": registry.families[tool.family].grant_model.model_json_schema(),
            "confinement": layers[tool.family],
        }
        for tool in registry.catalogue()
    ]
    # What servers describe is theirs: it may quote a credential the grant sends them.
    rows = Secrets.from_environ().redact_value(rows)
    if args.json:
        print_json(rows)
        return EXIT_OK
    width = max(len(r["name"]) for r in rows)
    for row in rows:
        props = row["params"].get("properties", {})
        required = set(row["params"].get("required", []))
        params = ", ".join(f"{p}{'' if p in required else '?'}" for p in props)
        effect = {True: "side effects", False: "read-only"}.get(row["side_effects"], "per call")
        print(neutralize(f"{row['name']:<{width}}  {effect:<12}  {row['description']}"))
        print(neutralize(f"{'':<{width}}  params: {params}"))
        if row["output"] is not None:  # what `steps.X.output` holds
            fields = ", ".join(row["output"].get("properties", {}))
            print(neutralize(f"{'':<{width}}  output: {fields}"))
    for name, discovering in sorted(registry.families.items()):
        if discovering.discovery is not None and not any(r["family"] == name for r in rows):
            print(f"{name}.*  {discovering.description}: `planloom tools RECIPE` lists a recipe's")
    print("\nconfinement on this machine:")
    for family, report in sorted(layers.items()):
        for layer, state in report.items():
            print(f"  {family:<6} {layer:<40} {state}")
        if not report:
            print(f"  {family:<6} (no confinement layers: runs in-process, gated by grants)")
    return EXIT_OK
