"""Who helped and who cheated: contribution scores, copies, the norm guard, queue limits, ratings, credit.

Usage:
    from woolf.scoring import check_queue, screen_delta, score_delta, judge_scores, judge, verdict_fields
    from woolf.scoring.board import leaderboard, credit                                       # the CLI
"""

from woolf.scoring.score import judge, judge_scores, score_delta, verdict_fields
from woolf.scoring.screen import Screened, check_queue, screen_delta

__all__ = ["Screened", "check_queue", "judge", "judge_scores", "score_delta", "screen_delta", "verdict_fields"]
