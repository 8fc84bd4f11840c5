"""Choosing a run's settings: the time/distortion trade-off sweep of Algorithm C's ν, K and m̃
(:mod:`.tradeoff`, :func:`daskmicro.sweep`), the setting it recommends within a distortion budget
(:mod:`.points`), and the seeded QI samples the sweep and a report's exact-MDAV reference run on
(:mod:`.sampling`).  Pages and plots of a sweep are drawn by :mod:`daskmicro.report`.
"""
