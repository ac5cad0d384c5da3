"""dreamgym: RL for LLM web agents on real and simulated web environments.

Importing dreamgym registers its Gymnasium ids (``dreamgym/miniwob.<task>-v0``
and ``dreamgym/sim.miniwob.<task>-v0``, see :mod:`dreamgym.adapters`) when
Gymnasium is installed. Registering imports neither a browser, nor torch, nor
transformers: those load when an env is made.
"""


def _register_gymnasium_envs() -> None:
    import importlib.util

    if importlib.util.find_spec("gymnasium") is None:
        return
    from dreamgym.adapters import register_envs

    register_envs()


_register_gymnasium_envs()
