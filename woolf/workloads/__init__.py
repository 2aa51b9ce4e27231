"""Workloads: the model, its training and its evaluation, behind one interface."""
