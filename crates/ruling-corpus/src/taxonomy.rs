//! The kinds of question the distilled set asks (`docs/distill.md`, "The taxonomy"): what a
//! program asks about a text, beyond the tasks of the labelled sources.
//!
//! Each [`Kind`] has its label vocabularies and instruction templates, and
//! [`Kind::draft`] writes one question of it about a state: a noul, a choice or a score,
//! its options drawn from the vocabulary (2 to 30 of them; names alone or with descriptions;
//! sometimes an abstain option), its wording drawn from the templates. The same kinds are
//! what the writer model is asked for ([`Kind::writer_brief`]), so the two sources of
//! questions cover the same ground.
//!
//! The held-out sets measure generalisation, so no kind copies one of their tasks with its
//! label set: the topic vocabulary is the development sources' own topics and categories
//! (ChatterBot's, the fortunes', Medical Abstracts', CLINC150's domains), never AG News' four
//! sections; what a question asks for is named from WordNet's supersenses, never TREC's six
//! types; requests are generic, never BANKING77's intents.

use std::collections::HashSet;

use rand::Rng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand_chacha::ChaCha8Rng;
use ruling_schema::{Question, Text};

/// What kind of question: the taxonomy's entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Topic or subject area of any text.
    Topic,
    /// What sort of text it is: an e-mail, a speech, a definition, code.
    Genre,
    /// Which language it is written in.
    Language,
    /// Positive or negative, outside reviews.
    Sentiment,
    /// Tone and emotion: angry, polite, sarcastic, worried.
    Tone,
    /// How urgent, what priority.
    Urgency,
    /// Spam, scam, phishing.
    Spam,
    /// Whether the text says something: statements it supports, contradicts or leaves open.
    Claim,
    /// Whether the text mentions something.
    Mention,
    /// What the writer asks for.
    Request,
    /// Who or what the text is about.
    Subject,
    /// How formal it is.
    Formality,
    /// Whether it is safe: offensive, threatening, harmful.
    Safety,
    /// Whether code is correct.
    Code,
    /// What a question is looking for.
    Seeks,
}

impl Kind {
    pub const ALL: [Kind; 15] = [
        Kind::Topic,
        Kind::Genre,
        Kind::Language,
        Kind::Sentiment,
        Kind::Tone,
        Kind::Urgency,
        Kind::Spam,
        Kind::Claim,
        Kind::Mention,
        Kind::Request,
        Kind::Subject,
        Kind::Formality,
        Kind::Safety,
        Kind::Code,
        Kind::Seeks,
    ];

    /// The name in statistics and in record families (`distill_topic`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Topic => "topic",
            Kind::Genre => "genre",
            Kind::Language => "language",
            Kind::Sentiment => "sentiment",
            Kind::Tone => "tone",
            Kind::Urgency => "urgency",
            Kind::Spam => "spam",
            Kind::Claim => "claim",
            Kind::Mention => "mention",
            Kind::Request => "request",
            Kind::Subject => "subject",
            Kind::Formality => "formality",
            Kind::Safety => "safety",
            Kind::Code => "code",
            Kind::Seeks => "seeks",
        }
    }

    /// What the kind asks, in a line (the taxonomy table of `docs/distill.md`).
    pub fn describe(self) -> &'static str {
        match self {
            Kind::Topic => "the topic, subject area or category of any text",
            Kind::Genre => {
                "what sort of text it is: e-mail, speech, story, definition, code, question"
            }
            Kind::Language => "which language the text is written in",
            Kind::Sentiment => "positive, negative or neutral, of any text",
            Kind::Tone => "the writer's tone or emotion: angry, polite, sarcastic, worried",
            Kind::Urgency => "how urgent the text is, what priority it deserves",
            Kind::Spam => "whether a message is spam, a scam or phishing",
            Kind::Claim => "whether the text says a statement, contradicts it, or leaves it open",
            Kind::Mention => "whether the text mentions something: money, a date, a person",
            Kind::Request => "what the writer asks for, if anything",
            Kind::Subject => {
                "who or what the text is about: a person, a place, an object, an event"
            }
            Kind::Formality => "how formal or casual the writing is",
            Kind::Safety => "whether the text is offensive, threatening or harmful",
            Kind::Code => "whether a piece of code is correct",
            Kind::Seeks => "what a question is looking for: a person, a place, a number, a reason",
        }
    }

    /// What the writer model is asked to write for this kind, when it writes about a state.
    pub fn writer_brief(self) -> &'static str {
        match self {
            Kind::Claim => {
                "statements about the document asked as yes/no questions (\"Does the text say \
                 that ...?\"): some the document clearly supports, some it contradicts (change a \
                 name, number or fact), some it does not mention"
            }
            Kind::Topic => {
                "which of several topics or categories the document belongs to, with options you choose to fit it"
            }
            Kind::Mention => {
                "whether the document mentions specific things, people, places or facts"
            }
            Kind::Request => "what the writer asks the reader to do or to give",
            Kind::Subject => {
                "who or what the document is mainly about, with named candidates as options"
            }
            other => other.describe(),
        }
    }

    /// Whether a question of this kind makes sense about `state`.
    pub fn applies(self, state: &StateInfo) -> bool {
        match self {
            Kind::Code => state.genre == Genre::Code,
            Kind::Seeks => state.is_question,
            Kind::Spam => state.is_message,
            Kind::Urgency | Kind::Request => state.is_message || state.genre == Genre::Request,
            Kind::Language => state.genre != Genre::Code,
            Kind::Claim => state.genre != Genre::Code,
            _ => state.genre != Genre::Code || matches!(self, Kind::Topic | Kind::Genre),
        }
    }

    /// One question of this kind about `state`, its type, options and wording drawn with
    /// `rng`.
    /// `text` is the state as the model reads it: entries of a vocabulary whose words it
    /// holds are asked about more often than the rest, so that not every question about one
    /// entry is a plain no.
    pub fn draft(self, state: &StateInfo, text: &str, rng: &mut ChaCha8Rng) -> Question {
        let words = Words::of(text);
        let labelled = |rng: &mut ChaCha8Rng, wordings: &Labelled, vocabulary: &[(&str, &str)]| {
            labelled(rng, wordings, vocabulary, &words.relevant(vocabulary))
        };
        match self {
            Kind::Topic => labelled(rng, &TOPIC, TOPICS),
            Kind::Genre => labelled(rng, &GENRE, GENRES),
            Kind::Language => language(state, rng),
            Kind::Sentiment => scaled(rng, &SENTIMENT),
            Kind::Tone => labelled(rng, &TONE, TONES),
            Kind::Urgency => scaled(rng, &URGENCY),
            Kind::Spam => scaled(rng, &SPAM),
            Kind::Claim => {
                let claim = pick(rng, CLAIMS).0;
                noul_of(rng, CLAIM_NOULS, claim)
            }
            Kind::Mention => labelled(rng, &MENTION, MENTIONS),
            Kind::Request => labelled(rng, &REQUEST, REQUESTS),
            Kind::Subject => labelled(rng, &SUBJECT, SUBJECTS),
            Kind::Formality => scaled(rng, &FORMALITY),
            Kind::Safety => scaled(rng, &SAFETY),
            Kind::Code => scaled(rng, &CODE),
            Kind::Seeks => labelled(rng, &SEEKS, SEEKING),
        }
    }
}

impl std::str::FromStr for Kind {
    type Err = crate::ParseNameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
                crate::ParseNameError::new("kind", s, format!("one of {}", names.join(", ")))
            })
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What sort of text a state is, as its source says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Genre {
    Email,
    Speech,
    Novel,
    Encyclopedia,
    Definition,
    Example,
    Quotation,
    ChatMessage,
    Request,
    Review,
    SocialComment,
    Abstract,
    Caption,
    Code,
    Legal,
}

/// What the question drafts need to know about a state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateInfo {
    pub genre: Genre,
    /// Whether it is a message someone sent (an e-mail, a chat turn, a request).
    pub is_message: bool,
    /// Whether it is itself a question.
    pub is_question: bool,
    /// Whether it is in English (the language question then offers English more often).
    pub english: bool,
}

impl StateInfo {
    pub fn new(genre: Genre, text: &str, english: bool) -> Self {
        let is_message = matches!(
            genre,
            Genre::Email | Genre::ChatMessage | Genre::Request | Genre::SocialComment
        );
        StateInfo {
            genre,
            is_message,
            is_question: looks_like_question(text),
            english,
        }
    }
}

/// Whether a short text reads as a question: it ends with a question mark, or starts with a
/// question word or an auxiliary verb.
pub fn looks_like_question(text: &str) -> bool {
    let text = text.trim();
    if text.split_whitespace().count() > 40 {
        return false;
    }
    if text.ends_with('?') {
        return true;
    }
    let first = text
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_lowercase()
        .split(['\'', '\u{2019}'])
        .next()
        .unwrap_or("")
        .trim_matches(|c: char| !c.is_alphanumeric())
        .to_owned();
    [
        "who", "what", "when", "where", "why", "how", "which", "whose", "whom", "is", "are", "do",
        "does", "did", "can", "could", "will", "would", "should", "name",
    ]
    .contains(&first.as_str())
}

// ---------------------------------------------------------------------------------------------
// Vocabularies: (option name, description).

/// Topics, from the development sources' own: ChatterBot's topics, the fortunes' categories,
/// Medical Abstracts' conditions, CLINC150's and HWU64's domains.
pub const TOPICS: &[(&str, &str)] = &[
    ("sports", "games, teams, athletes and competitions"),
    ("politics", "government, elections, laws and politicians"),
    ("money", "money, prices, banking and investing"),
    ("science", "physics, chemistry, biology and research"),
    ("computers", "computers, software and the internet"),
    ("health", "health, illness and medicine"),
    ("food", "food, drink, cooking and restaurants"),
    ("history", "past events and historical figures"),
    ("literature", "books, authors and poetry"),
    ("movies", "films, actors and television"),
    ("music", "songs, bands and musical instruments"),
    ("travel", "trips, flights, hotels and places to visit"),
    ("law", "laws, courts, crime and lawyers"),
    ("education", "schools, teachers and learning"),
    ("work", "jobs, offices and careers"),
    ("religion", "faith, churches and belief"),
    ("war", "armies, battles and the military"),
    ("business", "companies, trade and commerce"),
    ("nature", "animals, plants and the outdoors"),
    ("weather", "rain, storms, temperatures and the climate"),
    ("family", "parents, children and relationships"),
    ("love", "love and romance"),
    ("art", "painting, sculpture and artists"),
    ("technology", "machines, gadgets and inventions"),
    ("transport", "cars, trains, ships and commuting"),
    ("home", "the house, chores and household appliances"),
    ("shopping", "buying things, orders and deliveries"),
    ("philosophy", "ideas about life, truth and wisdom"),
    ("humor", "jokes and funny stories"),
    ("the sea", "ships, sailors, whales and the ocean"),
    ("language", "words, grammar and meanings"),
    ("human rights", "rights and freedoms of people"),
    ("agriculture", "farming, crops and livestock"),
    ("the economy", "jobs, growth, taxes and trade of a country"),
    (
        "foreign affairs",
        "relations with other nations, treaties and diplomacy",
    ),
    ("psychology", "the mind, behaviour and feelings"),
    ("programming", "writing and fixing code"),
    ("cancer", "tumours and their treatment"),
    ("the heart", "the heart and blood vessels"),
    ("the brain", "the brain and nerves"),
];

/// Sorts of text, from what each source is.
pub const GENRES: &[(&str, &str)] = &[
    ("email", "a message sent by e-mail"),
    ("speech", "a speech given to an audience"),
    ("story", "a passage from a novel or story"),
    ("encyclopedia", "an encyclopedia article"),
    ("definition", "a dictionary definition"),
    ("example sentence", "a sentence showing how a word is used"),
    ("quotation", "a quotation, saying or joke"),
    ("chat", "a message in a conversation with a chatbot"),
    ("request", "a request to a voice assistant"),
    ("review", "a review of a film or product"),
    ("comment", "a comment posted on social media"),
    ("scientific abstract", "the summary of a research paper"),
    (
        "description of a scene",
        "a sentence describing a picture or scene",
    ),
    ("code", "a computer program"),
    ("legal text", "a law, treaty or declaration"),
    ("advertisement", "an advertisement or sales offer"),
    ("news report", "a report of recent events"),
    ("poem", "a poem or song lyrics"),
    ("letter", "a personal letter"),
    ("question", "a question someone asks"),
];

/// Tones and emotions.
pub const TONES: &[(&str, &str)] = &[
    ("angry", "the writer is angry or annoyed"),
    ("polite", "the writer is courteous"),
    ("rude", "the writer is impolite or insulting"),
    (
        "sarcastic",
        "the writer says the opposite of what they mean",
    ),
    ("humorous", "the writer is joking"),
    ("worried", "the writer is anxious or concerned"),
    ("excited", "the writer is enthusiastic"),
    ("sad", "the writer is unhappy"),
    ("grateful", "the writer thanks someone"),
    ("neutral", "no particular emotion"),
    ("confused", "the writer does not understand something"),
    ("hopeful", "the writer expects something good"),
    ("solemn", "serious and dignified"),
    ("proud", "the writer is proud of something"),
    (
        "frustrated",
        "the writer is fed up with something not working",
    ),
    ("curious", "the writer wants to know something"),
    ("fearful", "the writer is afraid"),
    ("admiring", "the writer admires someone or something"),
];

/// Things a text may mention.
pub const MENTIONS: &[(&str, &str)] = &[
    ("an amount of money", "a price, a sum or a cost"),
    ("a date or time", "a day, a date, a year or a time of day"),
    ("a person's name", "someone named"),
    ("a place", "a city, a country or an address"),
    ("a phone number", "digits to call"),
    ("a web address", "a link or a website"),
    ("a deadline", "a time by which something must be done"),
    ("a company", "a business or organisation named"),
    ("an animal", "any animal"),
    ("food", "anything eaten or drunk"),
    ("a number", "any figure or count"),
    ("a weapon", "a gun, a knife, a harpoon"),
    ("a disease", "an illness or medical condition"),
    ("a war", "a war or battle"),
    ("a law", "a law, bill or regulation"),
    ("a family member", "a parent, child, sibling or spouse"),
    ("a computer program", "software or an app"),
    ("a password", "a password or login"),
    ("a vehicle", "a car, ship, train or plane"),
    ("the weather", "rain, sun, wind or temperature"),
];

/// Things a writer may ask for.
pub const REQUESTS: &[(&str, &str)] = &[
    ("a refund", "money back"),
    ("help with a problem", "something does not work"),
    ("information", "facts or an answer"),
    ("an appointment", "a meeting or booking"),
    ("a password reset", "access to an account"),
    ("a recommendation", "advice on what to choose"),
    ("money", "a payment, a donation or a loan"),
    ("a reply", "an answer to the message"),
    (
        "personal details",
        "a name, address, account or card number",
    ),
    (
        "a cancellation",
        "stopping an order, booking or subscription",
    ),
    ("a purchase", "buying a product or service"),
    (
        "an action by a device",
        "turning something on or off, playing, setting",
    ),
    ("feedback", "an opinion on something"),
    ("permission", "being allowed to do something"),
    ("a delivery", "sending something somewhere"),
    ("a conversation", "just chatting"),
];

/// What a text can be about, from WordNet's supersenses.
pub const SUBJECTS: &[(&str, &str)] = &[
    ("a person", "someone, named or not"),
    ("a group", "a group, organisation, team or nation"),
    ("a place", "a location, city, country or region"),
    ("an object", "a man-made thing or product"),
    ("an event", "something that happened or will happen"),
    ("an idea", "a concept, belief or theory"),
    ("an animal", "an animal or animals"),
    ("a plant", "a plant or crop"),
    ("a process", "how something happens or is done"),
    ("a feeling", "an emotion or state of mind"),
    ("a substance", "a material, chemical or food"),
    ("a time", "a period, date or era"),
    ("an act", "something someone does"),
    ("a body part", "part of the body"),
    ("a quantity", "an amount or measurement"),
    ("a communication", "a message, speech, text or sign"),
];

/// What a question can be looking for, named from WordNet's supersenses.
pub const SEEKING: &[(&str, &str)] = &[
    ("a person", "who someone is or was"),
    ("a place", "where something is or happened"),
    ("a number", "how many, how much, a quantity or measurement"),
    ("a date or time", "when something happens or happened"),
    ("a meaning", "what a word, term or thing is"),
    ("a reason", "why something is so"),
    ("a method", "how to do something"),
    ("a thing", "an object, animal, food, product or other thing"),
    ("a group", "an organisation, team or company"),
    ("a yes or no", "whether something is true"),
    ("an opinion", "what the reader thinks"),
    (
        "a short form",
        "what an abbreviation stands for, or how to abbreviate",
    ),
    ("an event", "what happened"),
    ("a choice", "which of several things"),
];

/// Statements to check against a text that hold for many texts, or for few.
pub const CLAIMS: &[(&str, &str)] = &[
    ("the writer is asking for something", ""),
    ("someone is thanked", ""),
    ("a price is given", ""),
    ("something went wrong", ""),
    ("the writer is unhappy", ""),
    ("a decision has been made", ""),
    ("someone is in danger", ""),
    ("a meeting is being arranged", ""),
    ("the text gives advice", ""),
    ("a country is named", ""),
    ("the events take place at sea", ""),
    ("the writer disagrees with someone", ""),
    ("the text describes a rule or law", ""),
    ("something is being sold", ""),
    ("the text is about the future", ""),
    ("the text is about the past", ""),
    ("a problem is described and solved", ""),
    ("the writer uses the first person", ""),
];

// ---------------------------------------------------------------------------------------------
// Wordings.

/// The wordings of a kind asked with a vocabulary: `{x}` is one entry's name.
struct Labelled {
    choice: &'static [&'static str],
    noul: &'static [&'static str],
    score: &'static [&'static str],
    /// The levels of a score question about one entry, lowest first.
    levels: &'static [&'static [&'static str]],
}

const DEGREE: &[&[&str]] = &[
    &["not at all", "a little", "mostly", "entirely"],
    &["no", "somewhat", "yes"],
    &[
        "not at all",
        "slightly",
        "moderately",
        "strongly",
        "completely",
    ],
    &["none", "low", "medium", "high"],
];

const TOPIC: Labelled = Labelled {
    choice: &[
        "What is this text about?",
        "Which topic does this text belong to?",
        "Classify the text by its subject.",
        "Which category fits this text best?",
        "File this text under one of these topics.",
    ],
    noul: &[
        "Is this text about {x}?",
        "Does this text deal with {x}?",
        "Would this text belong in a collection about {x}?",
        "Is {x} the main subject here?",
    ],
    score: &[
        "How much is this text about {x}?",
        "To what degree does this text concern {x}?",
    ],
    levels: DEGREE,
};

const GENRE: Labelled = Labelled {
    choice: &[
        "What kind of text is this?",
        "What sort of document is this?",
        "Which genre does this text belong to?",
        "Where would you expect to find this text?",
    ],
    noul: &[
        "Is this text {x}?",
        "Could this be {x}?",
        "Does this read like {x}?",
    ],
    score: &["How much does this text read like {x}?"],
    levels: DEGREE,
};

const TONE: Labelled = Labelled {
    choice: &[
        "What is the tone of this text?",
        "How does the writer sound?",
        "Which word best describes the writer's mood?",
        "What emotion does the text express most?",
    ],
    noul: &[
        "Does the writer sound {x}?",
        "Is the tone of this text {x}?",
        "Would a reader call this text {x}?",
    ],
    score: &[
        "How {x} is the tone of this text?",
        "How {x} does the writer sound?",
    ],
    levels: DEGREE,
};

const MENTION: Labelled = Labelled {
    choice: &[
        "Which of these does the text mention?",
        "What does the text refer to?",
    ],
    noul: &[
        "Does the text mention {x}?",
        "Is {x} mentioned in the text?",
        "Does the text refer to {x} anywhere?",
    ],
    score: &["How prominent is {x} in the text?"],
    levels: &[
        &["not mentioned", "mentioned in passing", "central"],
        &["absent", "present", "the main point"],
    ],
};

const REQUEST: Labelled = Labelled {
    choice: &[
        "What does the writer ask for?",
        "What does this message request?",
        "What does the sender want from the reader?",
    ],
    noul: &[
        "Does the writer ask for {x}?",
        "Is this a request for {x}?",
        "Does the message ask for {x}?",
    ],
    score: &["How clearly does the writer ask for {x}?"],
    levels: &[
        &["not at all", "indirectly", "explicitly"],
        &["no", "maybe", "yes"],
    ],
};

const SUBJECT: Labelled = Labelled {
    choice: &[
        "Who or what is this text mainly about?",
        "What is the main subject of the text?",
        "The text is chiefly about which of these?",
    ],
    noul: &[
        "Is this text mainly about {x}?",
        "Is the subject of this text {x}?",
    ],
    score: &["How much of the text is about {x}?"],
    levels: DEGREE,
};

const SEEKS: Labelled = Labelled {
    choice: &[
        "What is the asker looking for?",
        "What would a good answer to this question be?",
        "What should the reply to this give?",
        "Which sort of information does this question want?",
    ],
    noul: &[
        "Is the answer to this {x}?",
        "Does this question ask for {x}?",
        "Would {x} answer this?",
    ],
    score: &["How likely is it that the answer is {x}?"],
    levels: &[
        &["unlikely", "possible", "likely", "certain"],
        &["no", "perhaps", "yes"],
    ],
};

const CLAIM_NOULS: &[&str] = &[
    "Does the text say that {x}?",
    "According to the text, is it true that {x}?",
    "Is it stated or clearly implied that {x}?",
    "True or false: {x}.",
];

/// A kind asked on a scale (or as a noul or choice over the same judgement).
struct Scaled {
    noul: &'static [&'static str],
    choice: &'static [(&'static str, &'static [(&'static str, &'static str)])],
    score: &'static [(&'static str, &'static [&'static str])],
}

const SENTIMENT: Scaled = Scaled {
    noul: &[
        "Is the sentiment of this text positive?",
        "Is the writer unhappy about something?",
        "Is this text negative in tone?",
        "Does the text express approval?",
    ],
    choice: &[
        (
            "What is the overall sentiment of the text?",
            &[("positive", ""), ("negative", ""), ("neutral", "")],
        ),
        (
            "How does the writer feel about the subject?",
            &[
                ("approves", "likes it"),
                ("disapproves", "dislikes it"),
                ("mixed", "both"),
                ("indifferent", "no opinion"),
            ],
        ),
        (
            "Is the text good news or bad news?",
            &[("good news", ""), ("bad news", ""), ("neither", "")],
        ),
    ],
    score: &[
        (
            "How positive is this text?",
            &[
                "very negative",
                "negative",
                "neutral",
                "positive",
                "very positive",
            ],
        ),
        (
            "Rate the text's sentiment.",
            &["negative", "neutral", "positive"],
        ),
        (
            "How happy does the writer seem?",
            &["miserable", "unhappy", "fine", "happy", "delighted"],
        ),
        (
            "How favourable is the text to its subject?",
            &["hostile", "critical", "balanced", "favourable"],
        ),
    ],
};

const URGENCY: Scaled = Scaled {
    noul: &[
        "Does this need a reply today?",
        "Is this urgent?",
        "Can this wait until next week?",
        "Should someone act on this immediately?",
    ],
    choice: &[
        (
            "What priority should this get?",
            &[("low", ""), ("normal", ""), ("high", ""), ("critical", "")],
        ),
        (
            "When does this need attention?",
            &[
                ("now", "within the hour"),
                ("today", ""),
                ("this week", ""),
                ("whenever", "no deadline"),
            ],
        ),
    ],
    score: &[
        (
            "How urgent is this?",
            &["not urgent", "somewhat urgent", "urgent", "critical"],
        ),
        (
            "What priority does this deserve?",
            &["low", "medium", "high"],
        ),
        (
            "How soon must someone act?",
            &[
                "no action needed",
                "within a month",
                "within a week",
                "today",
                "immediately",
            ],
        ),
    ],
};

const SPAM: Scaled = Scaled {
    noul: &[
        "Is this message spam?",
        "Is this a phishing attempt?",
        "Is someone trying to scam the reader?",
        "Is this unsolicited advertising?",
        "Does this message ask for bank or account details?",
        "Is this a legitimate personal or work message?",
    ],
    choice: &[
        (
            "What kind of message is this?",
            &[
                ("legitimate", "a real message to the reader"),
                ("spam", "unsolicited bulk advertising"),
                ("phishing", "tries to steal logins or details"),
                ("scam", "tries to trick the reader out of money"),
            ],
        ),
        (
            "How should a mail filter treat this?",
            &[("inbox", ""), ("promotions", ""), ("junk", "")],
        ),
        (
            "Who most likely sent this?",
            &[
                ("a friend or colleague", ""),
                ("a mailing list", ""),
                ("a company the reader uses", ""),
                ("a spammer", ""),
            ],
        ),
    ],
    score: &[
        (
            "How likely is this message to be spam?",
            &[
                "certainly not",
                "unlikely",
                "possibly",
                "likely",
                "certainly",
            ],
        ),
        (
            "How suspicious is this message?",
            &["not suspicious", "a little", "very"],
        ),
    ],
};

const FORMALITY: Scaled = Scaled {
    noul: &[
        "Is this written formally?",
        "Is the language casual?",
        "Would this be appropriate in an official document?",
        "Does the writer use slang?",
    ],
    choice: &[
        (
            "What register is the text written in?",
            &[
                ("casual", ""),
                ("neutral", ""),
                ("formal", ""),
                ("official", "legal or ceremonial"),
            ],
        ),
        (
            "Who is this text written for?",
            &[
                ("a friend", ""),
                ("a colleague", ""),
                ("the public", ""),
                ("an official body", ""),
            ],
        ),
    ],
    score: &[
        (
            "How formal is the writing?",
            &[
                "very informal",
                "informal",
                "neutral",
                "formal",
                "very formal",
            ],
        ),
        (
            "How polished is the language?",
            &["rough", "plain", "careful", "elaborate"],
        ),
    ],
};

const SAFETY: Scaled = Scaled {
    noul: &[
        "Does this text contain offensive language?",
        "Is this text safe to show to children?",
        "Does the text threaten anyone?",
        "Does the text encourage illegal or dangerous acts?",
        "Would a moderator remove this text?",
    ],
    choice: &[
        (
            "How should a moderator rate this text?",
            &[
                ("safe", "fine for anyone"),
                ("sensitive", "mature themes"),
                ("offensive", "insulting or vulgar"),
                ("dangerous", "threats or harm"),
            ],
        ),
        (
            "What is the main risk in this text, if any?",
            &[
                ("none", ""),
                ("profanity", ""),
                ("violence", ""),
                ("fraud", ""),
                ("hate", ""),
                ("self-harm", ""),
            ],
        ),
    ],
    score: &[
        (
            "How harmful is this text?",
            &["harmless", "mildly", "moderately", "severely"],
        ),
        (
            "How offensive is the language?",
            &["not at all", "a little", "quite", "very"],
        ),
    ],
};

const CODE: Scaled = Scaled {
    noul: &[
        "Does this code do what its docstring says?",
        "Would this function pass its tests?",
        "Is there a bug in this code?",
        "Is this implementation correct for every input the docstring allows?",
    ],
    choice: &[
        (
            "What is the state of this code?",
            &[
                ("correct", "does what the docstring says"),
                ("buggy", "runs but gives wrong answers"),
                ("incomplete", "missing parts"),
            ],
        ),
        (
            "What would a reviewer say?",
            &[("approve", ""), ("request changes", ""), ("reject", "")],
        ),
    ],
    score: &[
        (
            "How likely is this code to be correct?",
            &[
                "surely wrong",
                "probably wrong",
                "unsure",
                "probably right",
                "surely right",
            ],
        ),
        (
            "How confident are you the tests pass?",
            &["not at all", "somewhat", "very"],
        ),
    ],
};

// ---------------------------------------------------------------------------------------------
// Drafting.

fn pick<'a, T>(rng: &mut ChaCha8Rng, items: &'a [T]) -> &'a T {
    items.choose(rng).expect("a non-empty list")
}

/// How many options a drawn choice offers: usually 3 to 8, sometimes 2, sometimes up to 30
/// (never more than the vocabulary holds).
fn option_count(rng: &mut ChaCha8Rng, available: usize) -> usize {
    let wanted = match rng.random_range(0..10) {
        0 => 2,
        1..=6 => rng.random_range(3..=8),
        7 | 8 => rng.random_range(9..=14),
        _ => rng.random_range(15..=30),
    };
    wanted.min(available).max(2)
}

/// Abstain options, added to a fifth of choices.
const ABSTAIN: &[(&str, &str)] = &[
    ("none", "none of the other options applies"),
    ("other", "something not listed"),
    ("none of these", ""),
];

/// A choice over options drawn from `vocabulary`, names alone or with descriptions, sometimes
/// with an abstain option; where the text touches on some entries (`relevant`), one of them
/// is among the options seven times in ten.
fn choice_over(
    rng: &mut ChaCha8Rng,
    instructions: &str,
    vocabulary: &[(&str, &str)],
    relevant: &[usize],
) -> Question {
    let count = option_count(rng, vocabulary.len());
    let mut drawn: Vec<&(&str, &str)> = vocabulary.choose_multiple(rng, count).collect();
    if !relevant.is_empty() && rng.random_bool(0.7) {
        let wanted = &vocabulary[*pick(rng, relevant)];
        if !drawn.contains(&wanted) {
            drawn[0] = wanted;
        }
    }
    drawn.shuffle(rng);
    let described = rng.random_bool(0.5);
    let mut criteria: Vec<(String, Text)> = drawn
        .into_iter()
        .map(|(name, description)| option(name, description, described))
        .collect();
    if rng.random_bool(0.2) {
        let (name, description) = pick(rng, ABSTAIN);
        if !criteria.iter().any(|(k, _)| k == name) {
            criteria.push(option(name, description, described));
        }
    }
    Question::Choice {
        instructions: Text::from(instructions.to_owned()),
        criteria: criteria.into_iter().collect(),
    }
}

fn option(name: &str, description: &str, described: bool) -> (String, Text) {
    let text = if described && !description.is_empty() {
        Text::from(description.to_owned())
    } else {
        Text::null()
    };
    (name.to_owned(), text)
}

fn noul_of(rng: &mut ChaCha8Rng, templates: &[&str], x: &str) -> Question {
    Question::Noul {
        instructions: Text::from(pick(rng, templates).replace("{x}", x)),
        criteria: None,
    }
}

fn score_of(instructions: String, levels: &[&str]) -> Question {
    Question::Score {
        instructions: Text::from(instructions),
        criteria: levels.iter().map(|l| Text::from((*l).to_owned())).collect(),
    }
}

/// The question types drawn: noul 40%, choice 40%, score 20%.
enum Type {
    Noul,
    Choice,
    Score,
}

fn draw_type(rng: &mut ChaCha8Rng) -> Type {
    match rng.random_range(0..10) {
        0..=3 => Type::Noul,
        4..=7 => Type::Choice,
        _ => Type::Score,
    }
}

/// The words of a text, lowercased, for finding the vocabulary entries it touches on.
struct Words(HashSet<String>);

impl Words {
    fn of(text: &str) -> Self {
        Words(
            text.split(|c: char| !c.is_alphanumeric())
                .filter(|w| w.len() >= 4)
                .map(str::to_lowercase)
                .collect(),
        )
    }

    /// The entries of `vocabulary` with a word of four letters or more (its name's or its
    /// description's) that begins a word of the text, compared on at most five letters
    /// ("athletes" meets "athletic").
    fn relevant(&self, vocabulary: &[(&str, &str)]) -> Vec<usize> {
        vocabulary
            .iter()
            .enumerate()
            .filter(|(_, (name, description))| {
                name.split(|c: char| !c.is_alphanumeric())
                    .chain(description.split(|c: char| !c.is_alphanumeric()))
                    .filter(|w| w.len() >= 4 && !STOPWORDS.contains(&w.to_lowercase().as_str()))
                    .any(|w| {
                        let key: String = w.to_lowercase().chars().take(5).collect();
                        self.0.iter().any(|t| t.starts_with(&key))
                    })
            })
            .map(|(i, _)| i)
            .collect()
    }
}

/// Words too common to say what a text is about.
const STOPWORDS: &[&str] = &[
    "about",
    "other",
    "someone",
    "something",
    "their",
    "there",
    "these",
    "this",
    "that",
    "with",
    "from",
    "what",
    "when",
    "where",
    "which",
    "named",
    "given",
    "does",
    "thing",
    "things",
    "more",
    "most",
    "being",
    "have",
    "into",
    "your",
    "they",
    "them",
    "than",
    "then",
    "only",
    "just",
    "very",
    "also",
    "like",
    "make",
    "writer",
    "reader",
    "text",
    "message",
    "someone's",
];

/// An entry of a vocabulary: one the text touches on (`relevant`) half the time where there is
/// one, otherwise any.
fn entry<'v>(
    rng: &mut ChaCha8Rng,
    vocabulary: &'v [(&'v str, &'v str)],
    relevant: &[usize],
) -> &'v str {
    if !relevant.is_empty() && rng.random_bool(0.5) {
        vocabulary[*pick(rng, relevant)].0
    } else {
        pick(rng, vocabulary).0
    }
}

fn labelled(
    rng: &mut ChaCha8Rng,
    wordings: &Labelled,
    vocabulary: &[(&str, &str)],
    relevant: &[usize],
) -> Question {
    match draw_type(rng) {
        Type::Choice => {
            let instructions = *pick(rng, wordings.choice);
            choice_over(rng, instructions, vocabulary, relevant)
        }
        Type::Noul => {
            let x = entry(rng, vocabulary, relevant);
            noul_of(rng, wordings.noul, x)
        }
        Type::Score => {
            let x = entry(rng, vocabulary, relevant);
            let template = pick(rng, wordings.score);
            let levels = pick(rng, wordings.levels);
            score_of(template.replace("{x}", x), levels)
        }
    }
}

fn scaled(rng: &mut ChaCha8Rng, wordings: &Scaled) -> Question {
    match draw_type(rng) {
        Type::Noul => noul_of(rng, wordings.noul, ""),
        Type::Choice => {
            let (instructions, options) = pick(rng, wordings.choice);
            let described = rng.random_bool(0.5);
            let mut criteria: Vec<(String, Text)> = options
                .iter()
                .map(|(name, description)| option(name, description, described))
                .collect();
            criteria.shuffle(rng);
            Question::Choice {
                instructions: Text::from((*instructions).to_owned()),
                criteria: criteria.into_iter().collect(),
            }
        }
        Type::Score => {
            let (instructions, levels) = pick(rng, wordings.score);
            score_of((*instructions).to_owned(), levels)
        }
    }
}

/// The language question: a choice over named languages (English among them most of the
/// time for English texts), or a noul about one.
fn language(state: &StateInfo, rng: &mut ChaCha8Rng) -> Question {
    const COMMON: &[&str] = &[
        "English",
        "French",
        "German",
        "Spanish",
        "Italian",
        "Portuguese",
        "Dutch",
        "Russian",
        "Chinese",
        "Japanese",
        "Korean",
        "Arabic",
        "Hindi",
        "Persian",
        "Turkish",
        "Swedish",
        "Polish",
        "Indonesian",
        "Latin",
        "Greek",
        "Swahili",
        "Ukrainian",
        "Bengali",
        "Hebrew",
    ];
    let named = |rng: &mut ChaCha8Rng| -> &'static str {
        if state.english && rng.random_bool(0.4) {
            "English"
        } else {
            let language: &&'static str = pick(rng, COMMON);
            language
        }
    };
    match rng.random_range(0..10) {
        0..=4 => {
            let x = named(rng);
            let templates = [
                "Is this text written in {x}?",
                "Is the language of this text {x}?",
                "Would a reader who knows only {x} understand this text?",
            ];
            noul_of(rng, &templates, x)
        }
        _ => {
            let count = option_count(rng, COMMON.len()).min(12);
            let mut drawn: Vec<&str> = COMMON.choose_multiple(rng, count).copied().collect();
            if state.english && !drawn.contains(&"English") && rng.random_bool(0.7) {
                drawn[0] = "English";
            }
            drawn.shuffle(rng);
            let instructions = *pick(
                rng,
                &[
                    "Which language is this text written in?",
                    "What language is this?",
                    "Identify the language of the text.",
                ],
            );
            let mut criteria: Vec<(String, Text)> = drawn
                .iter()
                .map(|l| ((*l).to_owned(), Text::null()))
                .collect();
            if rng.random_bool(0.3) {
                criteria.push(("another language".to_owned(), Text::null()));
            }
            Question::Choice {
                instructions: Text::from(instructions.to_owned()),
                criteria: criteria.into_iter().collect(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use ruling_schema::{Capabilities, validate};

    fn info(genre: Genre, text: &str) -> StateInfo {
        StateInfo::new(genre, text, true)
    }

    #[test]
    fn every_kind_drafts_valid_questions_of_every_type() {
        let caps = Capabilities::default();
        let states = [
            info(
                Genre::Email,
                "Subject: hi\n\nPlease send the invoice by Friday.",
            ),
            info(Genre::Request, "what time is it in tokyo?"),
            info(Genre::Code, "def f(x):\n    return x"),
            info(Genre::Novel, "Call me Ishmael."),
        ];
        let mut types = std::collections::BTreeSet::new();
        for kind in Kind::ALL {
            for state in &states {
                if !kind.applies(state) {
                    continue;
                }
                let mut rng = ChaCha8Rng::seed_from_u64(7);
                for _ in 0..60 {
                    let question = kind.draft(state, "a text", &mut rng);
                    types.insert((kind, question.type_name()));
                    let request = serde_json::json!({
                        "model": "m", "state": "text", "questions": {"q": question}
                    });
                    validate(&request, &caps).unwrap_or_else(|e| panic!("{kind}: {e:?}"));
                }
            }
        }
        for kind in Kind::ALL {
            let asked: Vec<_> = types.iter().filter(|(k, _)| *k == kind).collect();
            assert!(!asked.is_empty(), "{kind} was never asked");
        }
        // The vocabularies give choices of the whole 2-to-30 range.
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let counts: Vec<usize> = (0..400).map(|_| option_count(&mut rng, 40)).collect();
        assert!(counts.contains(&2) && counts.iter().any(|&c| c >= 25));
        assert!(counts.iter().all(|&c| (2..=30).contains(&c)));
    }

    #[test]
    fn entries_a_text_touches_on_are_found() {
        let words = Words::of("The team won the game after the athletic director resigned.");
        let found: Vec<&str> = words
            .relevant(TOPICS)
            .into_iter()
            .map(|i| TOPICS[i].0)
            .collect();
        assert!(found.contains(&"sports"), "{found:?}");
        assert!(!found.contains(&"cancer"), "{found:?}");
    }

    #[test]
    fn questions_are_told_apart_from_statements() {
        assert!(looks_like_question("what's the capital of peru"));
        assert!(looks_like_question("Where do whales sleep?"));
        assert!(!looks_like_question("set an alarm for 7 am"));
        assert!(!looks_like_question("I love this film."));
    }

    #[test]
    fn no_topic_set_is_a_held_out_label_set() {
        // AG News' sections by name: World, Sports, Business, Sci/Tech.
        for forbidden in ["world", "sci/tech", "science/technology"] {
            assert!(TOPICS.iter().all(|(t, _)| *t != forbidden), "{forbidden}");
        }
        // TREC's six coarse types by name.
        for forbidden in [
            "abbreviation",
            "entity",
            "description",
            "human",
            "location",
            "numeric",
        ] {
            assert!(SEEKING.iter().all(|(t, _)| *t != forbidden), "{forbidden}");
        }
    }
}
