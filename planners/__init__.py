"""Where plans come from: YAML recipes, the LLM planner, cassettes; and the ReAct loop."""

from planners.recipe import load_recipe, parse_recipe_text, read_recipe

__all__ = ["load_recipe", "parse_recipe_text", "read_recipe"]
