"""Pure decision code: no clock, no I/O, no framework imports.

Everything here is a function of its arguments, so the simulator, the service
and every backend run exactly the same decisions.
"""
