"""Runnable kappaflow example applications."""
