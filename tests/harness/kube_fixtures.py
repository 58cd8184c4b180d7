"""Pytest fixtures for the local Kubernetes control plane (filled in by the Kubernetes harness)."""
