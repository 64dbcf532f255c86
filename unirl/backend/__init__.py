"""Trainer backends as data: the framework contract and its mapping tables, the native base class every GPU backend
builds on, the LaunchPlan, the backend's environment (interpreter or container), data export, rollout engines, and
the plan-level tools (diff, advise).
"""
