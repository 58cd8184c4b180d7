"""kappaflow's Kubernetes operator: reconciles StreamApp resources into runtime pods."""
