"""Entity mentions: n-grams against local titles and redirects, capitalised spans for what is missing."""

from __future__ import annotations

import pytest

from backends.entities import concept_words, find_mentions, missing_entities
from indexer.store import Store


@pytest.fixture(scope="module")
def store(gensim_store):
    with Store.open(gensim_store) as s:
        yield s


def test_local_entity_resolves_and_missing_one_is_reported(store):
    ms = find_mentions("Aristotle tutored Alexander the Great in Macedonia.", store)
    by_text = {m.text: m for m in ms}
    assert by_text["Aristotle"].resolution.title == "Aristotle"
    assert by_text["Aristotle"].start == 0
    missing = missing_entities(ms)
    assert "Alexander the Great" in missing
    assert "Aristotle" not in missing


def test_longest_match_wins_and_possessive(store):
    ms = find_mentions("Arthur Schopenhauer's pessimism influenced many.", store)
    resolved = [m for m in ms if m.resolution]
    assert [m.resolution.title for m in resolved] == ["Arthur Schopenhauer"]


def test_loose_normalised_match(store):
    ms = find_mentions("ALDOUS HUXLEY wrote novels", store)
    assert any(m.resolution and m.resolution.title == "Aldous Huxley" and not m.resolution.exact for m in ms)


def test_covered_entities_are_not_missing(store):
    ms = find_mentions("Aristotle tutored Alexander the Great.", store)
    assert missing_entities(ms, covered_text="... he tutored Alexander the Great from 343 BC ...") == []


def test_no_mentions_in_function_words(store):
    assert find_mentions("The and of in it was", store) == []
    assert find_mentions("", store) == []


@pytest.mark.parametrize(
    "claim, name",
    [
        ("Polar bears are classified as endangered.", "Polar bears"),
        ("The Greek language is spoken in Greece.", "Greek language"),
        ("Morse code is used in air traffic control.", "Morse code"),
    ],
)
def test_a_subject_with_a_lowercase_head_noun_is_one_name(store, claim, name):
    texts = [m.text for m in find_mentions(claim, store)]
    assert name in texts


@pytest.mark.parametrize(
    "claim, not_a_name",
    [
        ("Aristotle studied at Plato's Academy.", "Aristotle studied"),  # a verb, not a head noun
        ("Tablet computers use touchscreens.", "Tablet computers use"),
        ("Frequently, French Indochina is abbreviated.", "Frequently"),  # sentence-initial adverb
        ("Frequently, French Indochina is abbreviated.", "Frequently, French Indochina"),  # ...set off by a comma
        ("According to the 2001 census, what was the population of Aristotle's city?", "According"),  # a participle
        ("Born on 6 March 1937, this man was also a citizen of Greece.", "Born"),
    ],
)
def test_subject_extension_does_not_swallow_verbs_or_adverbs(store, claim, not_a_name):
    assert not_a_name not in [m.text for m in find_mentions(claim, store)]


@pytest.mark.parametrize(
    "claim, name",
    [
        ("What occupation do Chris Menges and Aram Avakian share?", "Aram Avakian"),  # a surname ending in -ian
        ("Are both George Duran and Ara Babajian famous chefs?", "Ara Babajian"),
    ],
)
def test_a_name_ending_like_a_demonym_is_a_name(store, claim, name):
    assert name in [m.text for m in find_mentions(claim, store)]


def test_a_language_or_people_is_named_by_its_adjective(store):
    assert "Greek" in [m.text for m in find_mentions("At least 13.2 million people speak the Greek language.", store)]


def test_an_adjective_of_nationality_ending_a_question_is_not_part_of_the_name(store):
    ms = find_mentions("Are both Aldous Huxley and Arthur Schopenhauer Italian?", store)
    assert [m.text for m in ms] == ["Aldous Huxley", "Arthur Schopenhauer"]
    # A two-word name that ends like a demonym stays whole at the end of a sentence.
    assert [m.text for m in find_mentions("The film was directed by Aram Avakian.", store)] == ["Aram Avakian"]


def test_a_name_made_of_function_words_is_a_name(store):
    claim = "Are Aldous Huxley and For Against both from England?"
    ms = find_mentions(claim, store)
    assert "For Against" in [m.text for m in ms]
    assert "For Against" in missing_entities(ms, claim=claim, covered=[("Aldous Huxley", "Huxley was against ...")])
    # A participle opens the sentence only before a function word: "Reading is a town" names Reading.
    assert "Reading" in [m.text for m in find_mentions("Reading is a town in Berkshire.", store)]


def test_a_court_case_is_one_name(store):
    ms = find_mentions("Rostker v. Goldberg held that the practice of what was constitutional?", store)
    assert [m.text for m in ms] == ["Rostker v. Goldberg"]


@pytest.mark.parametrize(
    "claim, adjective",
    [
        ("2014 S/S is the debut album of a South Korean boy group.", "Korean"),
        ("Snatch is a 2000 British film by Guy Ritchie.", "British"),
        ("Wilhelm Reich was an Austrian psychoanalyst.", "Austrian"),
        ("What type of forum did a former Soviet statesman initiate?", "Soviet"),  # not ending like one
        ("Which German project recorded a song?", "German"),
    ],
)
def test_an_adjective_of_nationality_is_not_a_name(store, claim, adjective):
    assert not [m.text for m in find_mentions(claim, store) if adjective in m.text and not m.resolved]


@pytest.mark.parametrize(
    "question, title",
    [
        (
            'What is the name for the adventure in "Tunnels and Trolls", a game designed by Ken St. Andre?',
            "Tunnels and Trolls",
        ),
        ('Who wrote "Shut Up, Make Love"?', "Shut Up, Make Love"),  # a comma inside the title
        ('Which band recorded "Old and in the Way?"', "Old and in the Way"),  # the question mark is the question's
        ("Who starred in \u201cRebel Without a Cause,\u201d in 1955?", "Rebel Without a Cause"),  # curly quotes
        ('Which city did the "Prince of tenors" star in?', "Prince of tenors"),  # a nickname
    ],
)
def test_a_quoted_title_is_one_missing_name(store, question, title):
    ms = find_mentions(question, store)
    quoted = [m for m in ms if m.quoted]
    assert [m.text for m in quoted] == [title]
    assert question[quoted[0].start : quoted[0].end] == title
    missing = missing_entities(ms, claim=question)
    assert title in missing
    # None of the words of the title is looked up on its own.
    assert not [n for n in missing if n != title and n in title]


def test_a_quoted_phrase_is_not_a_title_and_names_around_a_quoted_nickname_stay(store):
    assert not [m for m in find_mentions('Is "dwelling place of the dead" a phrase of Aristotle?', store) if m.quoted]
    ms = find_mentions('Martin Patterson "Pat" Hingle was an actor.', store)
    assert [m.text for m in ms if not m.resolved] == ["Martin Patterson", "Pat", "Hingle"]


def test_a_quoted_title_that_resolves_locally_is_one_resolved_mention(store):
    ms = find_mentions('Who wrote "Arthur Schopenhauer and Aldous Huxley" in 1990?', store)
    assert [m.text for m in ms if m.quoted] == ["Arthur Schopenhauer and Aldous Huxley"]  # unresolved as a whole
    ms = find_mentions('Who wrote about "Arthur Schopenhauer" in 1900?', store)
    assert [(m.text, m.resolution.title) for m in ms if m.resolved] == [("Arthur Schopenhauer", "Arthur Schopenhauer")]
    assert not [m for m in ms if m.quoted or not m.resolved]


def test_a_disambiguation_page_is_not_the_page_of_the_name(store):
    """A local "X (disambiguation)" lists the pages called X; it is none of them, so X is still looked up."""
    claim = (
        'When was the British author who wrote the novel on which "Here We Go Round the Mulberry Bush" was based born?'
    )
    ms = find_mentions(claim, store)
    dab = [("Here We Go Round the Mulberry Bush (disambiguation)", "Here We Go Round the Mulberry Bush may refer to:")]
    assert missing_entities(ms, claim=claim, covered=dab) == ["Here We Go Round the Mulberry Bush"]
    film = [("Here We Go Round the Mulberry Bush (film)", "Here We Go Round the Mulberry Bush is a 1968 film.")]
    assert missing_entities(ms, claim=claim, covered=film) == []


def test_a_number_made_an_adjective_does_not_start_a_name(store):
    from backends.entities import names_in

    assert names_in("Kiss and Tell is a 1945 film starring 17-year-old Shirley Temple as Corliss Archer.") == [
        "Kiss",
        "Tell",
        "Shirley Temple",
        "Corliss Archer",
    ]
    assert "1967 Pan American Games" in names_in("He ran at the 1967 Pan American Games.")  # a year is part of it
    texts = [x.text for x in find_mentions("The 16-ton Burwash Mine bell was cast in 1890.", store)]
    assert "Burwash Mine" in texts and not any("16-ton" in t for t in texts)


def test_two_words_joined_by_and_are_one_name_or_two(store):
    """ "Kiss and Tell" may be one name or two: a top local title of the joined name covers both words; with
    neither local, the joined name is asked for first, then each word."""
    claim = "Who portrayed Corliss Archer in the film Kiss and Tell?"
    mentions = find_mentions(claim, store)
    assert [x.text for x in mentions if not x.resolved][-2:] == ["Kiss", "Tell"]
    covered = [("Kiss and Tell (1945 film)", "Kiss and Tell is a 1945 American comedy film.")]
    assert missing_entities(mentions, claim=claim, covered=covered) == ["Corliss Archer"]
    claim = "Who did the Star and Dagger bass player marry?"
    covered = [("Bass guitar", "The bass guitar is a plucked string instrument.")]
    assert missing_entities(find_mentions(claim, store), claim=claim, covered=covered) == [
        "Star and Dagger",
        "Star",
        "Dagger",
    ]


def test_a_month_is_no_auxiliary_and_a_quantifier_no_name():
    """ "Kent Lex Baer (born May 2, 1951)": "May" is a month, so "born" does not join the subject's name;
    "Several attorneys, including ..." opens with a quantifier."""
    from backends.entities import names_in

    assert names_in("Kent Lex Baer (born May 2, 1951) is an American college football coach.") == ["Kent Lex Baer"]
    assert names_in("Several attorneys, including Robert L. Goldberg, challenged it.") == ["Robert L. Goldberg"]
    assert names_in("Polar bears may swim far.") == ["Polar bears"]


def test_a_plural_subject_resolves_to_its_singular_page(store):
    """Titles are singular: "Amphibians" (opening the sentence) is the page "Amphibian"; a name ending in s that
    is a title as written keeps it ("Achilles", not "Achille")."""
    ms = find_mentions("Amphibians breathe through their skin.", store)
    assert [(m.text, m.resolution.title) for m in ms if m.resolution] == [("Amphibians", "Amphibian")]
    ms = find_mentions("Achilles fought at Troy.", store)
    assert [m.resolution.title for m in ms if m.resolution] == ["Achilles"]


def test_concept_words_are_the_lowercase_content_words_outside_mentions(store):
    claim = "Aristotle wrote about the algae's role in 12 lakes of Alabama."
    ms = find_mentions(claim, store)
    got = concept_words(claim, ms)
    assert [vs for _, vs in got] == [["wrote"], ["algae"], ["role"], ["lakes", "lake"]]
    assert [claim[i : i + len(vs[0])] for i, vs in got] == ["wrote", "algae", "role", "lakes"]
    assert concept_words("Aristotle Alabama", ms) == []
    claim = "Farmers study agricultural science and algae."
    ms = find_mentions(claim, store)
    assert "agricultural science" in [m.text for m in ms]  # a named concept: its words are no concepts of their own
    assert [vs[0] for _, vs in concept_words(claim, ms)] == ["study", "algae"]
