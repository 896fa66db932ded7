"""memory.retrieval: the fused score of recalled messages (episode share, neighbour, date cue, vectors), pure."""

from __future__ import annotations

from datetime import UTC, datetime

from memory.retrieval import Candidate, DateCue, date_cue, pool_score, ranked, score, tense_cue

MARCH = datetime(2025, 3, 14, 10, tzinfo=UTC)
JULY = datetime(2025, 7, 2, 10, tzinfo=UTC)


def test_without_other_terms_the_order_is_bm25s() -> None:
    cands = [Candidate(1, MARCH, 3.0), Candidate(2, MARCH, 1.0), Candidate(3, MARCH, 2.0)]
    assert ranked(score(cands, {}, "dog")) == [1, 3, 2]


def test_a_message_of_a_matching_episode_gets_its_share() -> None:
    # 2 and 3 have no word of the question; 3's episode matches as a whole, 2's does not
    cands = [Candidate(1, MARCH, 2.0, episode_id=10), Candidate(2, MARCH, 0.0, episode_id=20),
             Candidate(3, MARCH, 0.0, episode_id=10), Candidate(4, MARCH, 1.0, episode_id=20)]
    scores = score(cands, {10: 5.0, 20: 1.0}, "dog", neighbour=0)
    assert scores[3]["episode"] > scores[2]["episode"]
    assert ranked(scores).index(3) < ranked(scores).index(2)
    no_episode = score(cands, {10: 5.0, 20: 1.0}, "dog", neighbour=0, episode=0)
    assert no_episode[3]["fused"] == no_episode[2]["fused"]


def test_the_answer_next_to_a_matching_question_comes_with_it() -> None:
    # 2 answers 1 (the hit); 4 follows a weak hit (3); 5 is nobody's neighbour
    cands = [Candidate(1, MARCH, 4.0, next_id=2), Candidate(2, MARCH, 0.0, prev_id=1),
             Candidate(3, MARCH, 1.0, next_id=4), Candidate(4, MARCH, 0.0, prev_id=3), Candidate(5, MARCH, 0.0)]
    scores = score(cands, {}, "dog")
    order = ranked(scores)
    assert order.index(2) < order.index(4) < order.index(5)
    assert scores[2]["neighbour"] == 0.3 * scores[1]["lexical"]
    assert scores[2]["fused"] == scores[2]["lexical"] + scores[2]["episode"] + scores[2]["neighbour"]


def test_the_date_cue_lifts_messages_of_the_month_named() -> None:
    cands = [Candidate(1, JULY, 2.0), Candidate(2, MARCH, 1.9), Candidate(3, JULY, 0.1), Candidate(4, JULY, 0.2)]
    assert ranked(score(cands, {}, "What did I do in March?"))[:2] == [2, 1]
    assert ranked(score(cands, {}, "¿Qué hice en marzo de 2025?"))[:2] == [2, 1]
    assert ranked(score(cands, {}, "What did I do?"))[:2] == [1, 2]
    assert ranked(score(cands, {}, "¿Qué hice en marzo de 2024?"))[:2] == [1, 2], "another year's March"


def test_date_cues_in_english_and_spanish() -> None:
    assert date_cue("in March") == DateCue(3, None)
    assert date_cue("en marzo de 2025") == DateCue(3, 2025)
    assert date_cue("what happened in 2024?") == DateCue(None, 2024)
    assert date_cue("May I ask something?") == DateCue(None, None), "'may' the verb is no month"
    assert date_cue("in May") == DateCue(5, None)
    assert date_cue("¿Qué pasó en SEPTIEMBRE?") == DateCue(9, None)


def test_cosines_are_fused_with_the_lexical_score_at_their_share() -> None:
    # 2 shares no word with the question but is the closest in meaning; 3 neither
    cands = [Candidate(1, MARCH, 2.0), Candidate(2, MARCH, 0.0), Candidate(3, MARCH, 0.0)]
    lexical = score(cands, {}, "dog", neighbour=0)
    fused = score(cands, {}, "dog", {1: 0.50, 2: 0.90, 3: 0.10}, neighbour=0)
    assert lexical[2]["fused"] == lexical[3]["fused"]
    assert ranked(lexical)[0] == 1
    assert ranked(fused) == [1, 2, 3]
    assert fused[2]["vector"] == 0.90
    assert fused[2]["fused"] > fused[3]["fused"], "z(cosine) lifts 2 above 3"
    # 0.4 and 0.6, each side z-scored over the candidates: the lexical composite (1 alone is a hit: 0, -1, -1
    # before the z) and the cosines
    z_lex_2, z_cos_2 = -1 / 2 ** 0.5, (0.90 - 0.50) / 0.326598632
    assert abs(fused[2]["fused"] - (0.4 * z_lex_2 + 0.6 * z_cos_2)) < 1e-6
    assert ranked(score(cands, {}, "dog", {1: 0.20, 2: 0.90, 3: 0.10}, neighbour=0))[0] == 2, "near in meaning wins"
    assert fused[1]["lexical"] == lexical[1]["lexical"], "the lexical part is the lexical-only score's"


def test_pool_score_is_one_for_the_best_and_falls_per_z_unit() -> None:
    assert pool_score(3.0, 3.0) == 1.0
    assert pool_score(2.0, 3.0) == 0.5
    assert 0 < pool_score(-10.0, 3.0) < 0.1


def test_now_and_before_prefer_the_newer_or_the_older_of_equal_messages() -> None:
    # 1 (July) and 2 (March) say as much about the question; 3 is a weaker hit
    cands = [Candidate(1, JULY, 2.0), Candidate(2, MARCH, 2.0), Candidate(3, MARCH, 0.5)]
    plain = score(cands, {}, "Where do I work?")
    assert plain[1]["fused"] == plain[2]["fused"] and "recency" not in plain[1]
    for now in ("Where do I work now?", "¿Dónde trabajo ahora?", "What do I do these days?"):
        assert ranked(score(cands, {}, now))[0] == 1, now
    for before in ("Where did I work before my current job?", "¿Dónde trabajaba antes?", "What did I use to do?"):
        scores = score(cands, {}, before)
        assert ranked(scores)[0] == 2, before
        assert scores[2]["recency"] > 0 > scores[1]["recency"]
    with_vectors = score(cands, {}, "What car do I drive now?", {1: 0.5, 2: 0.5, 3: 0.1})
    assert ranked(with_vectors)[0] == 1


def test_tense_cues_in_english_and_spanish() -> None:
    assert [tense_cue(q) for q in ("Which city do I live in now?", "What's my current job?",
                                   "¿Qué coche tengo actualmente?", "¿Dónde vivo hoy en día?")] == [1, 1, 1, 1]
    assert [tense_cue(q) for q in ("What car did I have before?", "¿Qué coche tenía antes?",
                                   "Where did I live previously?", "¿Cuál era mi trabajo anterior?")] == [-1] * 4
    assert [tense_cue(q) for q in ("What is my favourite dish?", "¿Qué libros he leído?", "Nowhere to go")] == [0] * 3
