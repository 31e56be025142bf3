"""Gymnasium + Stable-Baselines3 agents (HalfCheetah by default): training the shipped policies."""
