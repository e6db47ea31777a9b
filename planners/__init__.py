"""Where plans come from: YAML recipes (and, later, the LLM planner)."""

from planners.recipe import load_recipe, parse_recipe_text, read_recipe

__all__ = ["load_recipe", "parse_recipe_text", "read_recipe"]
