"""Judgements over a state of the box: the memory picture, measured memory and its
tolerance, predict, diagnose, post-mortems, exit classes and the tokens/s roofline.
"""
