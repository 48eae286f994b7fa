"""The sampling daemon: the scheduler loop and its tick (``loop``), the sampler that
merges the collectors' readings, the live load watch, and the sd_notify protocol.
"""
