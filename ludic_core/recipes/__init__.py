"""Recipes: ready-made compositions of ludic_core parts for known tasks."""
