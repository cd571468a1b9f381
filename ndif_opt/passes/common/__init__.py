"""What several passes share: no pass imports another pass."""
