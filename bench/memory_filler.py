"""Everyday chatter for bench/memory_corpus.py, English and Spanish: what a person asks an assistant between the
things worth remembering, and the assistant's replies. Slots (`{food}`, `{place}` ...) are filled from the pools;
several templates name the same things the planted facts do (work, a dog, a book, a car, a city, food) so that a
word of a question also finds messages that do not answer it, as in a real history."""

from __future__ import annotations

import random
import re

POOLS = {
    "en": {
        "food": ["pasta", "curry", "soup", "salad", "pizza", "risotto", "burritos", "stir fry", "chili", "pancakes"],
        "place": ["the park", "the office", "the gym", "the supermarket", "the station", "the library", "town"],
        "day": ["Monday", "Tuesday", "Wednesday", "Friday", "Saturday", "Sunday", "tomorrow", "tonight"],
        "thing": ["the printer", "my laptop", "the wifi", "my phone", "the boiler", "the washing machine"],
        "person": ["Tom", "Priya", "my boss", "my neighbour", "Sam", "my cousin", "Dan", "the landlord"],
        "topic": ["taxes", "the budget", "a presentation", "the quarterly report", "an email", "a cover letter"],
        "adj": ["exhausting", "quiet", "busy", "weird", "fine", "long", "productive", "chaotic"],
        "weather": ["raining", "freezing", "sunny", "windy", "humid", "grey"],
    },
    "es": {
        "food": ["pasta", "lentejas", "sopa", "ensalada", "pizza", "croquetas", "tortilla", "gazpacho", "arroz",
                 "empanadas"],
        "place": ["el parque", "la oficina", "el gimnasio", "el súper", "la estación", "la biblioteca", "el centro"],
        "day": ["el lunes", "el martes", "el miércoles", "el viernes", "el sábado", "el domingo", "mañana",
                "esta noche"],
        "thing": ["la impresora", "el portátil", "el wifi", "el móvil", "la caldera", "la lavadora"],
        "person": ["Jorge", "Ana", "mi jefa", "mi vecino", "Dani", "mi primo", "Rocío", "el casero"],
        "topic": ["la declaración de la renta", "el presupuesto", "una presentación", "el informe trimestral",
                  "un correo", "una carta de presentación"],
        "adj": ["agotador", "tranquilo", "movido", "raro", "normal", "largo", "productivo", "caótico"],
        "weather": ["lloviendo", "helando", "haciendo sol", "haciendo viento", "bochorno", "nublado"],
    },
}

USER = {
    "en": [
        "Any quick recipe ideas for {food} tonight?", "Work was {adj} today, I need a break.",
        "Can you help me write {topic}?", "{thing} stopped working again, any ideas?",
        "It's {weather} here, should I still go to {place}?", "Remind me what I should buy for {food}.",
        "I'm meeting {person} on {day}, what's a good place for coffee?", "How long should I boil eggs for?",
        "My neighbour's dog barked all night, I barely slept.", "What's a good book for a long flight?",
        "Can you explain how compound interest works?", "I have to call {person} about {topic}, help me prepare.",
        "Is it normal for {thing} to make a clicking noise?", "Give me a 20 minute workout I can do at home.",
        "Traffic in the city was awful this morning.", "Should I take the car or the bus to {place}?",
        "What should I cook for {person} on {day}?", "I keep forgetting to drink water, any tricks?",
        "Translate 'where is the station' into French please.",
        "What's the difference between baking soda and powder?",
        "Feeling {adj}, the week is dragging.", "{person} invited me to a concert on {day}, not sure I'll go.",
        "How do I get wine stains out of a shirt?", "Suggest a podcast about history.",
        "Thinking of signing up for some lessons, maybe pottery.", "What time does {place} usually open on {day}?",
        "Help me plan the week, I have {topic} due {day}.", "The food at the work canteen was terrible today.",
        "Do you know any good board games for four people?", "I need a birthday gift idea for {person}.",
    ],
    "es": [
        "¿Alguna receta rápida de {food} para esta noche?", "El trabajo hoy fue {adj}, necesito descansar.",
        "¿Me ayudas a escribir {topic}?", "{thing} ha vuelto a fallar, ¿alguna idea?",
        "Está {weather} aquí, ¿voy igualmente a {place}?", "Recuérdame qué tengo que comprar para {food}.",
        "Quedo con {person} {day}, ¿un buen sitio para tomar café?", "¿Cuánto tiempo se cuecen los huevos?",
        "El perro del vecino ladró toda la noche, casi no dormí.", "¿Qué libro me recomiendas para un vuelo largo?",
        "¿Me explicas cómo funciona el interés compuesto?", "Tengo que llamar a {person} por {topic}, ayúdame.",
        "¿Es normal que {thing} haga un ruido raro?", "Dame una rutina de 20 minutos para hacer en casa.",
        "El tráfico en la ciudad estaba fatal esta mañana.", "¿Cojo el coche o el autobús para ir a {place}?",
        "¿Qué cocino para {person} {day}?", "Siempre se me olvida beber agua, ¿algún truco?",
        "Traduce 'dónde está la estación' al francés, por favor.", "¿Qué diferencia hay entre bicarbonato y levadura?",
        "Me siento {adj}, la semana se hace eterna.", "{person} me invitó a un concierto {day}, no sé si iré.",
        "¿Cómo quito una mancha de vino de una camisa?", "Recomiéndame un podcast de historia.",
        "Estoy pensando en apuntarme a clases de algo, quizá cerámica.", "¿A qué hora abre {place} {day}?",
        "Ayúdame a organizar la semana, tengo {topic} para {day}.",
        "La comida del comedor del trabajo hoy era horrible.",
        "¿Conoces algún juego de mesa bueno para cuatro personas?", "Necesito una idea de regalo para {person}.",
    ],
}

ASSISTANT = {
    "en": [
        "Sure! Here is a simple plan: start with the basics, keep it short, and check back with me if you get stuck.",
        "Good question. In short: it depends on the details, but the usual advice is to go step by step.",
        "Here are three ideas: keep it simple, prepare what you can the night before, and leave some time spare.",
        "That sounds frustrating. Try turning it off and on again, then check the cables and the settings.",
        "Of course. A short, friendly tone works best; open with the main point and end with a clear next step.",
        "I'd go for it, but take an umbrella and comfortable shoes just in case.",
        "Happy to help. Tell me a bit more about what you need and I'll tailor it.",
        "A quick option: {food} with whatever vegetables you have, ready in about twenty minutes.",
        "Sorry to hear that. Some rest and a calm evening might help you recover.",
        "Here's a draft you can adapt; change the names and dates to fit.",
    ],
    "es": [
        "¡Claro! Un plan sencillo: empieza por lo básico, hazlo corto y vuelve a preguntarme si te atascas.",
        "Buena pregunta. En resumen: depende de los detalles, pero lo habitual es ir paso a paso.",
        "Tres ideas: hazlo sencillo, prepara lo que puedas la noche anterior y deja algo de margen.",
        "Qué rabia. Prueba a apagarlo y encenderlo, y luego revisa los cables y la configuración.",
        "Por supuesto. Un tono breve y amable funciona mejor; empieza por lo importante y acaba con un paso claro.",
        "Yo iría, pero lleva paraguas y calzado cómodo por si acaso.",
        "Encantado de ayudar. Cuéntame un poco más de lo que necesitas y lo ajusto.",
        "Una opción rápida: {food} con las verduras que tengas, lista en unos veinte minutos.",
        "Siento oír eso. Descansar y una tarde tranquila te pueden venir bien.",
        "Aquí tienes un borrador que puedes adaptar; cambia los nombres y las fechas.",
    ],
}

#: Said around a request now and then, so that the same template is not the same message every time.
OPENERS = {"en": ["Hey!", "Morning.", "Quick question:", "Ok so", "Hi again.", "Sorry to bother you,"],
           "es": ["¡Hola!", "Buenos días.", "Una pregunta:", "Vale, a ver,", "Hola otra vez.", "Perdona,"]}
CLOSERS = {"en": ["Thanks!", "No rush.", "lol", "Cheers.", "Any thoughts?"],
           "es": ["¡Gracias!", "Sin prisa.", "jaja", "Un saludo.", "¿Qué opinas?"]}

_SLOT = re.compile(r"\{(\w+)\}")


def contract(text: str) -> str:
    """Spanish contractions a filled slot can call for: "a el" -> "al", "de el" -> "del"."""
    return text.replace(" a el ", " al ").replace(" de el ", " del ")


def fill(template: str, lang: str, rng: random.Random) -> str:
    """The template with every slot drawn from its pool (each occurrence drawn on its own)."""
    text = contract(_SLOT.sub(lambda m: rng.choice(POOLS[lang][m.group(1)]), template))
    return text[0].upper() + text[1:]


def user_line(lang: str, rng: random.Random) -> str:
    text = fill(rng.choice(USER[lang]), lang, rng)
    if rng.random() < 0.25:
        opener = rng.choice(OPENERS[lang])
        text = f"{opener} {text if opener[-1] in '.!' else text[0].lower() + text[1:]}"
    if rng.random() < 0.2:
        text = f"{text} {rng.choice(CLOSERS[lang])}"
    return text


def assistant_line(lang: str, rng: random.Random) -> str:
    return fill(rng.choice(ASSISTANT[lang]), lang, rng)
