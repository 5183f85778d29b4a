"""Design-space exploration of the accelerator (``vdla sweep``) and the executor it runs its points on.

This package sits above the library, like :mod:`vdla.experiments`: it may import any of vdla's packages, and
nothing in the library imports it. :mod:`vdla.sweep.executor` is generic (no sweep knowledge): ``vdla fuzz``
runs its programs on it too.
"""
