"""Everyday English sentences for training speech drafts: names, numbers, dates, times, prices, questions,
conversation and instructions, made from templates and word lists with a seeded generator.

    sentences(4000, seed=0)        # distinct sentences, 6 to 18 words, none of `exclude`

They are written as people write them ("3:30 pm", "$25.50", "May 3rd"), since the teacher's transcripts, not these
texts, are what a draft learns. The benchmark's held-out sentences (benchmarks/whisper_clips.py) are written by hand;
no template copies one, and tests/models/test_everyday.py checks that none of them is made.
"""

from __future__ import annotations

import numpy as np

NAMES = ("Maria", "Thomas", "Olivia", "James", "Aisha", "Kenji", "Sofia", "Daniel", "Priya", "Lucas", "Emma", "Omar",
         "Chloe", "Mateo", "Hannah", "Wei", "Grace", "Ethan", "Fatima", "Noah", "Isabella", "Liam", "Zoe", "Ravi",
         "Nora", "Samuel", "Leila", "Jack", "Amara", "Ben", "Elena", "Victor", "Ruth", "Tariq", "Megan", "Pedro",
         "Ingrid", "Carlos", "Yuki", "Peter", "Anna", "George", "Lucy", "Mohammed", "Sarah", "David", "Julia", "Ivan")
TITLES = ("Doctor", "Mister", "Miss", "Professor", "Aunt", "Uncle", "Coach", "Officer", "Grandpa", "Grandma")
SURNAMES = ("Patel", "Garcia", "Nguyen", "Smith", "Okafor", "Johnson", "Kowalski", "Brown", "Tanaka", "Silva",
            "Murphy", "Rossi", "Schmidt", "Khan", "Lee", "Martin", "Novak", "Walker", "Haddad", "Fischer")
PLACES = ("Chicago", "Lisbon", "Toronto", "the airport", "the station", "the library", "the office", "the beach",
          "Berlin", "the market", "the hospital", "Madrid", "the school", "Seattle", "the park", "Dublin", "Nairobi",
          "the gym", "the bakery", "Osaka", "the post office", "the mountains", "Sydney", "the bank", "the cinema")
THINGS = ("keys", "phone", "umbrella", "wallet", "laptop", "jacket", "glasses", "passport", "charger", "notebook",
          "bike", "car", "lunch box", "headphones", "camera", "backpack", "ticket", "scarf", "water bottle")
FOODS = ("pasta", "soup", "rice", "pizza", "salad", "curry", "pancakes", "tacos", "bread", "cake", "apples",
         "coffee", "tea", "orange juice", "sandwiches", "noodles", "cheese", "eggs", "chicken", "fish")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "tomorrow", "tonight",
        "next week", "this weekend", "this morning", "tomorrow afternoon")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
ACTIVITIES = ("go running", "watch a movie", "visit the museum", "play tennis", "bake cookies", "clean the kitchen",
              "paint the fence", "call the plumber", "study for the exam", "walk the dog", "fix the sink",
              "plant some tomatoes", "book the hotel", "wash the car", "read that novel", "go swimming",
              "pick up the kids", "finish the report", "visit my parents", "take the train")
FEELINGS = ("tired", "happy", "worried", "excited", "hungry", "busy", "nervous", "relaxed", "late", "sure")
JOBS = ("nurse", "teacher", "pilot", "engineer", "chef", "lawyer", "farmer", "dentist", "driver", "designer")
WEATHER = ("rain", "snow", "sunshine", "strong wind", "a thunderstorm", "fog", "clear skies", "a heat wave")
NUMBER_WORDS = ("two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "twelve", "fifteen",
                "twenty", "thirty", "fifty", "a hundred")
UNITS = ("minutes", "hours", "days", "weeks", "kilometers", "miles", "dollars", "euros", "pounds", "people")
ORDINALS = ("1st", "2nd", "3rd", "4th", "5th", "9th", "12th", "15th", "21st", "22nd", "28th", "30th")


def _time(rng) -> str:
    h, m = int(rng.integers(1, 13)), int(rng.choice([0, 5, 10, 15, 20, 30, 40, 45, 50]))
    return f"{h}:{m:02d} {'am' if rng.random() < 0.5 else 'pm'}" if m else f"{h} o'clock"


def _price(rng) -> str:
    whole = int(rng.choice([2, 3, 5, 8, 12, 15, 20, 25, 40, 60, 99, 120, 250]))
    return f"${whole}.{int(rng.choice([0, 25, 50, 99])):02d}" if rng.random() < 0.5 else f"{whole} dollars"


def _number(rng) -> str:
    return str(int(rng.integers(2, 100))) if rng.random() < 0.5 else str(rng.choice(NUMBER_WORDS))


def _date(rng) -> str:
    return f"{rng.choice(MONTHS)} {rng.choice(ORDINALS)}" if rng.random() < 0.7 else \
        f"the {rng.choice(ORDINALS)} of {rng.choice(MONTHS)}"


def _person(rng) -> str:
    r = rng.random()
    if r < 0.6:
        return str(rng.choice(NAMES))
    if r < 0.85:
        return f"{rng.choice(TITLES)} {rng.choice(SURNAMES)}"
    return f"{rng.choice(NAMES)} {rng.choice(SURNAMES)}"


TEMPLATES = (
    ("names", "{p} is flying back from {place} with {q} {day}."),
    ("names", "Please tell {p} that the meeting moved to {time}."),
    ("names", "{q} found {p}'s {thing} under the sofa."),
    ("names", "Have you met {p}? She works as a {job} near {place}."),
    ("names", "{p} said {q} would bring the {food} for the party."),
    ("names", "I ran into {p} at {place} and we talked for an hour."),
    ("names", "{p} is the new {job} at {place}, and everyone likes {him}."),
    ("numbers", "This soup needs {n} carrots, an onion and some salt."),
    ("numbers", "We drove {n} {unit} before we found a place to stop."),
    ("numbers", "At least {n} people signed up for the trip to {place}."),
    ("numbers", "Room {num} is on the {ord} floor, next to the elevator."),
    ("numbers", "My phone number is {digits}, call me after {time}."),
    ("numbers", "The train to {place} leaves from platform {num} at {time}."),
    ("numbers", "It is {n} {unit} from our house to {place}."),
    ("prices", "The {thing} cost {price}, which was cheaper than I expected."),
    ("prices", "Two tickets to {place} are {price} each on {day}."),
    ("prices", "Could you lend me {price} until {day}?"),
    ("prices", "A coffee and a slice of cake come to {price}."),
    ("dates", "My sister's birthday is on {date}, so keep that evening free."),
    ("dates", "The pool is shut for repairs between {date} and {date2}."),
    ("dates", "We moved to {place} on {date} three years ago."),
    ("dates", "Your appointment with {p} is on {date} at {time}."),
    ("times", "Let's meet at {place} at {time} on {day}."),
    ("times", "On {day} the shop is open from {time} to {time2}."),
    ("times", "I usually wake up at {time}, but {day} I slept in."),
    ("questions", "Shall we have {food} or {food2} on {day}?"),
    ("questions", "Has anybody seen my {thing} since this morning?"),
    ("questions", "What time does the bus to {place} leave {day}?"),
    ("questions", "Have you seen {p} since {day}?"),
    ("questions", "Why don't we {act} {day}?"),
    ("questions", "How much does it cost to {act} around here?"),
    ("questions", "Is {p} coming with us to {place} or not?"),
    ("questions", "Can you remind me to {act} {day}?"),
    ("questions", "Where did you learn to {act} like that?"),
    ("conversation", "I'm a bit {feel} today, so I think I'll stay home."),
    ("conversation", "Honestly, I didn't expect {p} to {act} at all."),
    ("conversation", "The bus got stuck behind a truck near {place} for ages."),
    ("conversation", "The {food} at that new place was really good."),
    ("conversation", "No problem, I can {act} {day} if you want."),
    ("conversation", "That sounds great, let me check with {p} first."),
    ("conversation", "Oh no, I think I left my {thing} on the train."),
    ("conversation", "We should {act} before it gets too dark."),
    ("conversation", "I told {p} we'd call back around {time}."),
    ("instructions", "Please {act} before {p} gets home."),
    ("instructions", "Go straight past {place} and take the first right."),
    ("instructions", "Remember that we promised to {act} {day}."),
    ("instructions", "Put the {food} in the oven for {n} minutes."),
    ("instructions", "Bring your {thing} and meet us at {place} by {time}."),
    ("instructions", "Hold the power button down for {n} seconds."),
    ("weather", "They expect {weather} over {place} {day}."),
    ("weather", "Take a jacket, there might be {weather} later."),
    ("weather", "We had {weather} all week, so we stayed inside."),
    ("work", "The {job} said the results will be ready on {date}."),
    ("work", "Our team has to finish the project by {day}."),
    ("work", "{p} will present the new plan at {time} in room {num}."),
    ("work", "I need {n} more {unit} to get everything done."),
)


def sentence(rng) -> tuple:
    """One (kind, sentence) drawn by `rng`."""
    kind, template = TEMPLATES[int(rng.integers(len(TEMPLATES)))]
    he = rng.random() < 0.5
    fill = dict(p=_person(rng), q=_person(rng), place=rng.choice(PLACES), day=rng.choice(DAYS), time=_time(rng),
                time2=_time(rng), thing=rng.choice(THINGS), food=rng.choice(FOODS), food2=rng.choice(FOODS),
                job=rng.choice(JOBS), n=_number(rng), m=_number(rng), unit=rng.choice(UNITS),
                num=str(int(rng.integers(1, 400))), ord=rng.choice(("first", "second", "third", "fourth", "fifth")),
                digits=" ".join(f"{int(rng.integers(100, 1000))}" for _ in range(2)) + f" {int(rng.integers(1000, 10000))}",
                price=_price(rng), date=_date(rng), date2=_date(rng), act=rng.choice(ACTIVITIES),
                feel=rng.choice(FEELINGS), weather=rng.choice(WEATHER), his="his" if he else "her",
                him="him" if he else "her")
    text = template.format(**{k: str(v) for k, v in fill.items()})
    return kind, text[0].upper() + text[1:]


def sentences(count: int, seed: int = 0, exclude=()) -> list:
    """`count` distinct (kind, sentence) pairs, none of whose sentences is in `exclude`."""
    rng = np.random.default_rng(seed)
    seen, out = {s.lower() for s in exclude}, []
    tries = 0
    while len(out) < count:
        tries += 1
        if tries > 50 * count:
            raise ValueError(f"the templates made only {len(out)} distinct sentences of {count}")
        kind, text = sentence(rng)
        if text.lower() not in seen:
            seen.add(text.lower())
            out.append((kind, text))
    return out
