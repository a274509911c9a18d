"""The whole deployment: instances -> classes -> one decision per prefill class x decode
class pair, plus the cluster-wide checks a single pair cannot see."""
