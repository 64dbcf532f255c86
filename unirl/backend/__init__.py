"""Trainer backends as data: the framework contract (capabilities, mapping tables, what a run hands a backend), the
native base class every GPU backend builds on (its ``plan`` a template method), the LaunchPlan, the backend's
environment (interpreter or container, the staged light core and the plugins it carries), data export, the rollout
engine type, and the plan-level tools (diff, advise). Knows no plugin and no plugin manager.
"""
