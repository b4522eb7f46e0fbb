"""Recipes: values, not code paths. Each is one env's settings for the whole chain
(teacher, keep rule, SFT and RL budgets, the demo table), written with the configs
of `ludic_core.compose`, which turns them into objects."""
