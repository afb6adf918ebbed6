"""Sokoban: seeded reverse-play generation, an optimal solver, and the text env."""

from .env import SokobanEnv
from .generate import GeneratedRoom, GenerationError, generate_room
from .room import ACTIONS, Layout, State, parse, render
from .solver import Solution, Solver

__all__ = [
    "ACTIONS",
    "GeneratedRoom",
    "GenerationError",
    "Layout",
    "SokobanEnv",
    "Solution",
    "Solver",
    "State",
    "generate_room",
    "parse",
    "render",
]
