"""Exploration bonuses: RND, the count bonus, episodic novelty and the intrinsic critic."""
