"""The one message catalogue: every text hilo says to a person, in English and Spanish.

`t(key, lang, **params)` picks the language by its primary subtag ("es-AR" -> "es"), falls back to
English, and formats `params` into the text. Operators' logs never come from here.
"""

from __future__ import annotations

LANGUAGES = ("en", "es")

MESSAGES: dict[str, dict[str, str]] = {
    "en": {
        "model_unavailable": (
            "Sorry, I can't answer right now: my language model is not responding. "
            "Your message is saved; please try again shortly."
        ),
        # -- answers without text (bot/answers.py) --
        "model_refused": "Sorry, I can't help with that.",
        "model_no_answer": "Sorry, I couldn't come up with an answer to that. Could you put it another way?",
        "model_cut_note": "(My answer was cut off here because it got too long. Ask me to go on if you want the rest.)",
        "message_too_long": "That message is too long ({length} characters). Please keep it under {limit}.",
        "empty_message": "That message is empty. Please write some text.",
        "bad_request": "That request could not be read: {detail}",
        "not_found": "That conversation does not exist.",
        "unauthorized": "Your session is missing or has expired. Please reload the page.",
        "store_unavailable": "I can't reach my memory right now. Please try again in a moment.",
        "payload_too_large": "That request is too large (limit {limit} bytes).",
        "too_deeply_nested": "That request is nested too deeply (limit {limit} levels).",
        "invalid_characters": "That request holds broken characters (a lone UTF-16 surrogate). Please send valid text.",
        "internal_error": "Something went wrong on my side. Please try again.",
        "forgotten": "Everything about {handle} has been deleted.",
        "nothing_to_forget": "There is nothing stored about {handle}.",
        "remembered": "Noted: I will remember that.",
        "summaries_dropped": "{count} episode summaries of {handle} dropped (the messages stay; they are not "
                             "written again).",
        "no_summaries": "There are no episode summaries of {handle}.",
        # -- commands (bot/commands.py) --
        "cmd_start": (
            "Hi! I'm hilo, your assistant. Just write to me: I remember our conversations here, on WhatsApp "
            "and on the web. Send /help to see what else I can do."
        ),
        "cmd_help": (
            "Just write to me, or use a command:\n"
            "/remember TEXT - ask me to remember something\n"
            "/memory - what I know about you, each with its id (m12)\n"
            "/forget m12 (or some words) - forget one thing\n"
            "/forget - delete everything I know about you\n"
            "/link - connect this chat with your other accounts\n"
            "/unlink - disconnect this chat from them\n"
            "/export - everything I keep about you, as a file\n"
            "/timezone Madrid - tell me your time zone (for times and reminders)\n"
            "/help - this list"
        ),
        "reminder": "⏰ Reminder: {text}",
        "cmd_timezone_is": "Your time zone: {zone} (it is {time} there now).",
        "cmd_timezone_set": "Done: your time zone is {zone} (it is {time} there now).",
        "cmd_timezone_unknown": "I don't know your time zone yet, so I use UTC. Tell me with e.g. /timezone Madrid",
        "cmd_timezone_not_found": (
            "I don't know a time zone called \"{words}\". Try a big city near you (/timezone Madrid) or a zone "
            "name such as /timezone America/Argentina/Buenos_Aires"
        ),
        "cmd_unknown": "I don't know the command /{name}. Send /help to see the ones I understand.",
        "cmd_private_only": "For your privacy, /{name} only works in a private chat with me.",
        "cmd_memory_empty": "I don't have anything stored about you yet.",
        "cmd_memory_facts": "What I know about you:\n{facts}",
        "cmd_memory_no_facts": "You haven't asked me to remember anything in particular yet.",
        "cmd_memory_more": "...and {count} more.",
        "cmd_memory_counts": (
            "What I keep: messages {messages}, conversations {conversations} ({surfaces}), since {since}. "
            "Send /forget to delete all of it."
        ),
        "cmd_forget_confirm": (
            "This deletes everything I know about you, on every surface: messages, conversations and facts. "
            "It cannot be undone. To confirm, send: /forget yes"
        ),
        "cmd_forget_done": (
            "Done: I have deleted everything I knew about you. If you write again, I start from scratch."
        ),
        "cmd_forget_nothing": "There is nothing stored about you.",
        "cmd_forget_failed": (
            "I could not delete your voice notes just now, so nothing has been deleted yet. Please send /forget yes "
            "again in a few minutes."
        ),
        "cmd_remember_usage": "Tell me what to remember, e.g. /remember I am vegetarian",
        "cmd_remember_added": "Noted: I will remember that ({id}).",
        "cmd_remember_merged": "I already knew that; I have updated it ({id}).",
        "cmd_remember_superseded": "Noted ({id}): it replaces what I knew before ({old}).",
        "cmd_forget_one_done": "Forgotten ({id}): {content}",
        "cmd_forget_no_id": "I have no memory {id}. Send /memory to see what I remember.",
        "cmd_forget_no_match": "Nothing I remember matches that. Send /memory to see what I remember, with ids.",
        "cmd_forget_which": "Several things match; send /forget with the id of the one to forget:\n{items}",
        "cmd_memory_id": "To forget one of them: /forget and its id (e.g. /forget {id}).",
        # -- the widget's "what I remember" view (GET /api/memories) --
        "widget_memories_title": "What I remember",
        "widget_memories_empty": "Nothing yet. Write /remember and something about you.",
        "widget_memories_forget": "Forget",
        "widget_memories_more": "...and {count} more.",
        # -- telegram --
        "telegram_non_text": (
            "I can't open this kind of file yet: I read text, voice notes and photos. Please write or say what "
            "you need (I do read a video's caption)."
        ),
        "telegram_not_allowed": (
            "Sorry, this is a private assistant and I can't chat with you. Nothing you send here is kept."
        ),
        # -- voice notes and audio (bot/media.py) --
        "voice_too_large": (
            "That voice note is too large for me (my limit is {limit}). Please send a shorter one, or write your "
            "message."
        ),
        "voice_too_long": (
            "That voice note is too long for me ({seconds} s; my limit is {limit} s). Please send a shorter one, or "
            "write your message."
        ),
        "voice_not_configured": (
            "I can't listen to voice notes here yet (transcription is not set up). I kept your voice note; please "
            "write your message."
        ),
        "voice_failed": (
            "Sorry, I couldn't transcribe your voice note just now. I kept it; please try again in a moment, or "
            "write your message."
        ),
        "voice_empty": "I couldn't make out any words in that voice note. Could you say it again, or write it?",
        # -- photos (bot/vision.py) --
        "image_too_large": (
            "That photo is too large for me (my limit is {limit}). Please send a smaller one, or describe it in "
            "words."
        ),
        "image_failed": (
            "Sorry, I couldn't get your photo just now. Please try sending it again in a moment, or describe it in "
            "words."
        ),
        # -- whatsapp --
        "whatsapp_media_only": (
            "I can't open this kind of file yet: I read text, voice notes and photos. Please write or say what "
            "you need (I do read a video's caption)."
        ),
        "whatsapp_resumed": "Welcome back: I will answer your messages again. Send STOP at any time to stop.",
        # -- web widget --
        "rate_limited": "You are sending messages too fast. Please wait {seconds} s and try again.",
        "origin_not_allowed": "This website is not allowed to use this chat.",
        "session_expired": "Your sign-in has expired. Please sign in again.",
        "sign_in_unavailable": "I can't check your sign-in right now. Please try again in a moment.",
        # -- identity linking --
        "link_code": (
            "Your link code is {code}. Within 10 minutes, send /link {code} from the other app or the web chat "
            "where you talk to me, and both will share one memory. Never share this code with anyone else."
        ),
        "link_done": "Done: this chat is now connected with your other accounts. I remember you here too.",
        "link_confirm": (
            "This code joins this chat to {who}. If you confirm, you will share one memory with that account: "
            "whoever uses it can ask me about everything said here, and you about everything said there. "
            "Confirm only if that account is yours: send /link {code} yes"
        ),
        "link_who": "{name} on {surface}",
        "link_who_unnamed": "an account with no name on {surface}",
        "link_joined": (
            "{who} just joined your account with the link code you asked for: you now share one memory. "
            "If that was not you, send /forget yes to delete everything I keep about you, on every app."
        ),
        "surface_telegram": "Telegram",
        "surface_whatsapp": "WhatsApp",
        "surface_web": "the web chat",
        "surface_cli": "the terminal",
        "link_already": "This chat is already connected with that account.",
        "link_invalid": "That code is not valid or has expired. Ask for a new one with /link where you started.",
        "link_own_code": "Send this code from your OTHER app or chat, not from this one.",
        "link_locked": "Too many wrong codes. For your safety, linking is paused here until {until} UTC.",
        "unlink_done": "Done: this chat is no longer connected. From now on I will treat it as a separate person.",
        "unlink_only": "This chat is not connected with any other account.",
        # issue 12, faults: a stop or a restart in the way (web 503 with Retry-After, the stream's error event)
        "restarting": "I am restarting. Please send that again in a moment.",
        "restarting_kept": "I am restarting. Your message is kept and I will answer it in a moment.",
        # -- inbound (issue 12): the database could not take a message; it is kept in the journal
        "message_kept": (
            "I have your message, but I can't answer right now. It is kept safe and I will reply as soon as I'm back."
        ),
        # -- issue 13, costs: a spend cap refused the turn's model call (bot/spend.py); the message stays stored
        "cap_reached_day": (
            "I've reached today's usage limit, so I can't answer right now. Your message is saved: please write "
            "again tomorrow."
        ),
        "cap_reached_month": (
            "I've reached this month's usage limit, so I can't answer right now. Your message is saved: please write "
            "again next month, or ask whoever runs this assistant."
        ),
        # -- issue 13, data: /export (bot/commands.py, bot/export.py) and the export's download page
        "cmd_export_link": (
            "Here is everything I keep about you, as a JSON file: {url}\n"
            "The link works for {minutes} minutes, and only opens your data."
        ),
        "cmd_export_document": "Everything I keep about you, as a JSON file.",
        "cmd_export_nothing": "There is nothing stored about you.",
        "cmd_export_cli": "To export everything about {handle}, run: hilo export --user {handle} --output FILE",
        "export_link_invalid": "This export link is not valid, or it expired: send /export again for a new one.",
        # -- issue 13, admin: the admin page (surfaces/admin.py, surfaces/admin/admin.js) and its API's errors
        "admin_title": "hilo admin",
        "admin_sign_in_heading": "Sign in to the admin page",
        "admin_token_label": "Admin token",
        "admin_sign_in": "Sign in",
        "admin_sign_out": "Sign out",
        "admin_people": "People",
        "admin_costs": "Costs",
        "admin_handle": "Handle",
        "admin_identities": "Linked identities",
        "admin_last_seen": "Last seen",
        "admin_never": "never",
        "admin_messages": "Messages",
        "admin_memories": "Memories",
        "admin_cost_usd": "Cost (USD)",
        "admin_previous": "Previous",
        "admin_next": "Next",
        "admin_page_of": "{first}-{last} of {total}",
        "admin_conversations": "Conversations",
        "admin_no_conversations": "No conversations.",
        "admin_no_memories": "No memories.",
        "admin_no_people": "Nobody has written yet.",
        "admin_older": "Older messages",
        "admin_edit": "Edit",
        "admin_save": "Save",
        "admin_cancel": "Cancel",
        "admin_delete": "Delete",
        "admin_confirm_delete": "Delete this memory? This cannot be undone.",
        "admin_ended": "ended",
        "admin_back": "Back to people",
        "admin_today": "Today (UTC)",
        "admin_month": "This month",
        "admin_all_time": "All time",
        "admin_calls": "Model calls",
        "admin_tokens": "Tokens in / out",
        "admin_windows": "Cap windows",
        "admin_top": "Who spent most",
        "admin_everyone": "Everyone",
        "admin_opted_out": "opted out",
        "admin_token_wrong": "That is not the admin token.",
        "admin_sign_in_needed": "Sign in to the admin page first.",
        "admin_csrf": "This change did not come from the admin page: reload it and try again.",
        "admin_memory_ended": "This memory is no longer current: edit the one that replaced it.",
    },
    "es": {
        "model_unavailable": (
            "Lo siento, ahora mismo no puedo responder: mi modelo de lenguaje no contesta. "
            "Tu mensaje está guardado; vuelve a intentarlo en un momento."
        ),
        "model_refused": "Lo siento, no puedo ayudarte con eso.",
        "model_no_answer": "Lo siento, no se me ha ocurrido una respuesta. ¿Puedes decirlo de otra manera?",
        "model_cut_note": (
            "(Mi respuesta se ha cortado aquí porque era demasiado larga. Pídeme que siga si quieres el resto.)"
        ),
        "message_too_long": "Ese mensaje es demasiado largo ({length} caracteres). El máximo es {limit}.",
        "empty_message": "Ese mensaje está vacío. Escribe algo de texto.",
        "bad_request": "No se ha podido leer la petición: {detail}",
        "not_found": "Esa conversación no existe.",
        "unauthorized": "Tu sesión falta o ha caducado. Recarga la página.",
        "store_unavailable": "Ahora mismo no puedo acceder a mi memoria. Inténtalo de nuevo en un momento.",
        "payload_too_large": "La petición es demasiado grande (límite: {limit} bytes).",
        "too_deeply_nested": "La petición tiene demasiados niveles anidados (límite: {limit}).",
        "invalid_characters": (
            "La petición contiene caracteres rotos (un sustituto UTF-16 suelto). Envía texto válido."
        ),
        "internal_error": "Algo ha fallado por mi parte. Inténtalo de nuevo.",
        "forgotten": "Se ha borrado todo lo relativo a {handle}.",
        "nothing_to_forget": "No hay nada guardado sobre {handle}.",
        "remembered": "Anotado: lo recordaré.",
        "summaries_dropped": "{count} resúmenes de episodios de {handle} descartados (los mensajes se quedan; no "
                             "se vuelven a escribir).",
        "no_summaries": "No hay resúmenes de episodios de {handle}.",
        # -- commands (bot/commands.py) --
        "cmd_start": (
            "¡Hola! Soy hilo, tu asistente. Escríbeme sin más: recuerdo nuestras conversaciones aquí, "
            "en WhatsApp y en la web. Envía /help para ver qué más puedo hacer."
        ),
        "cmd_help": (
            "Escríbeme sin más, o usa un comando:\n"
            "/remember TEXTO - pedirme que recuerde algo\n"
            "/memory - lo que sé de ti, cada cosa con su id (m12)\n"
            "/forget m12 (o unas palabras) - olvidar una cosa\n"
            "/forget - borrar todo lo que sé de ti\n"
            "/link - conectar este chat con tus otras cuentas\n"
            "/unlink - desconectar este chat de ellas\n"
            "/export - todo lo que guardo sobre ti, en un archivo\n"
            "/timezone Madrid - decirme tu zona horaria (para horas y recordatorios)\n"
            "/help - esta lista"
        ),
        "reminder": "⏰ Recordatorio: {text}",
        "cmd_timezone_is": "Tu zona horaria: {zone} (allí son las {time}).",
        "cmd_timezone_set": "Hecho: tu zona horaria es {zone} (allí son las {time}).",
        "cmd_timezone_unknown": "Todavía no sé tu zona horaria, así que uso UTC. Dímela, por ejemplo: /timezone Madrid",
        "cmd_timezone_not_found": (
            "No conozco ninguna zona horaria llamada \"{words}\". Prueba con una ciudad grande cerca de ti "
            "(/timezone Madrid) o con el nombre de una zona, como /timezone America/Argentina/Buenos_Aires"
        ),
        "cmd_unknown": "No conozco el comando /{name}. Envía /help para ver los que entiendo.",
        "cmd_private_only": "Por tu privacidad, /{name} solo funciona en un chat privado conmigo.",
        "cmd_memory_empty": "Todavía no tengo nada guardado sobre ti.",
        "cmd_memory_facts": "Lo que sé de ti:\n{facts}",
        "cmd_memory_no_facts": "Todavía no me has pedido que recuerde nada en particular.",
        "cmd_memory_more": "...y {count} más.",
        "cmd_memory_counts": (
            "Lo que guardo: mensajes {messages}, conversaciones {conversations} ({surfaces}), desde el {since}. "
            "Envía /forget para borrarlo todo."
        ),
        "cmd_forget_confirm": (
            "Esto borra todo lo que sé de ti, en todos los canales: mensajes, conversaciones y datos. "
            "No se puede deshacer. Para confirmarlo, envía: /forget sí"
        ),
        "cmd_forget_done": (
            "Hecho: he borrado todo lo que sabía de ti. Si vuelves a escribirme, empiezo de cero."
        ),
        "cmd_forget_nothing": "No hay nada guardado sobre ti.",
        "cmd_forget_failed": (
            "Ahora mismo no he podido borrar tus notas de voz, así que todavía no he borrado nada. Vuelve a enviar "
            "/forget yes en unos minutos."
        ),
        "cmd_remember_usage": "Dime qué recordar, por ejemplo: /remember soy vegetariana",
        "cmd_remember_added": "Anotado: lo recordaré ({id}).",
        "cmd_remember_merged": "Ya lo sabía; lo he actualizado ({id}).",
        "cmd_remember_superseded": "Anotado ({id}): sustituye a lo que sabía antes ({old}).",
        "cmd_forget_one_done": "Olvidado ({id}): {content}",
        "cmd_forget_no_id": "No tengo ningún recuerdo {id}. Envía /memory para ver lo que recuerdo.",
        "cmd_forget_no_match": "Nada de lo que recuerdo coincide. Envía /memory para ver lo que recuerdo, con sus ids.",
        "cmd_forget_which": "Coinciden varias cosas; envía /forget con el id de la que quieres olvidar:\n{items}",
        "cmd_memory_id": "Para olvidar una de ellas: /forget y su id (por ejemplo, /forget {id}).",
        "widget_memories_title": "Lo que recuerdo",
        "widget_memories_empty": "Nada todavía. Escribe /remember y algo sobre ti.",
        "widget_memories_forget": "Olvidar",
        "widget_memories_more": "...y {count} más.",
        # -- telegram --
        "telegram_non_text": (
            "Todavía no puedo abrir este tipo de archivo: leo texto, notas de voz y fotos. Escríbeme o dime qué "
            "necesitas (el pie de un vídeo sí lo leo)."
        ),
        "telegram_not_allowed": (
            "Lo siento, este es un asistente privado y no puedo hablar contigo. "
            "No guardo nada de lo que envíes aquí."
        ),
        # -- notas de voz y audio (bot/media.py) --
        "voice_too_large": (
            "Esa nota de voz es demasiado grande para mí (mi límite es {limit}). Envíame una más corta, o "
            "escríbeme tu mensaje."
        ),
        "voice_too_long": (
            "Esa nota de voz es demasiado larga para mí ({seconds} s; mi límite es {limit} s). Envíame una más "
            "corta, o escríbeme tu mensaje."
        ),
        "voice_not_configured": (
            "Aquí todavía no puedo escuchar notas de voz (la transcripción no está configurada). He guardado tu "
            "nota de voz; escríbeme tu mensaje, por favor."
        ),
        "voice_failed": (
            "Lo siento, ahora mismo no he podido transcribir tu nota de voz. La he guardado; inténtalo de nuevo en "
            "un momento, o escríbeme tu mensaje."
        ),
        "voice_empty": "No he entendido ninguna palabra en esa nota de voz. ¿Puedes repetirla, o escribirla?",
        # -- fotos (bot/vision.py) --
        "image_too_large": (
            "Esa foto es demasiado grande para mí (mi límite es {limit}). Envíame una más pequeña, o descríbemela "
            "con palabras."
        ),
        "image_failed": (
            "Lo siento, ahora mismo no he podido recibir tu foto. Vuelve a enviarla en un momento, o descríbemela "
            "con palabras."
        ),
        # -- whatsapp --
        "whatsapp_media_only": (
            "Todavía no puedo abrir este tipo de archivo: leo texto, notas de voz y fotos. Escríbeme o dime qué "
            "necesitas (el pie de un vídeo sí lo leo)."
        ),
        "whatsapp_resumed": (
            "Bienvenido de nuevo: volveré a responder a tus mensajes. Envía BAJA cuando quieras para parar."
        ),
        # -- web widget --
        "rate_limited": "Estás enviando mensajes demasiado deprisa. Espera {seconds} s y vuelve a intentarlo.",
        "origin_not_allowed": "Este sitio web no tiene permiso para usar este chat.",
        "session_expired": "Tu sesión ha caducado. Vuelve a iniciar sesión.",
        "sign_in_unavailable": "Ahora mismo no puedo comprobar tu inicio de sesión. Inténtalo de nuevo en un momento.",
        # -- identity linking --
        "link_code": (
            "Tu código de enlace es {code}. En los próximos 10 minutos, envía /link {code} desde la otra app o "
            "desde el chat web donde hablas conmigo, y ambos compartirán una sola memoria. No compartas este "
            "código con nadie."
        ),
        "link_done": "Hecho: este chat ya está conectado con tus otras cuentas. Aquí también te recuerdo.",
        "link_confirm": (
            "Este código une este chat con {who}. Si lo confirmas, compartirás una sola memoria con esa cuenta: "
            "quien la use podrá preguntarme por todo lo dicho aquí, y tú por todo lo dicho allí. "
            "Confírmalo solo si esa cuenta es tuya: envía /link {code} sí"
        ),
        "link_who": "{name} en {surface}",
        "link_who_unnamed": "una cuenta sin nombre en {surface}",
        "link_joined": (
            "{who} acaba de unirse a tu cuenta con el código de enlace que pediste: ahora compartís una sola "
            "memoria. Si no fuiste tú, envía /forget sí para borrar todo lo que guardo de ti, en todas las apps."
        ),
        "surface_telegram": "Telegram",
        "surface_whatsapp": "WhatsApp",
        "surface_web": "el chat web",
        "surface_cli": "la terminal",
        "link_already": "Este chat ya está conectado con esa cuenta.",
        "link_invalid": "Ese código no es válido o ha caducado. Pide uno nuevo con /link donde empezaste.",
        "link_own_code": "Envía este código desde tu OTRA app o chat, no desde este.",
        "link_locked": (
            "Demasiados códigos erróneos. Por tu seguridad, el enlace queda en pausa aquí hasta las {until} UTC."
        ),
        "unlink_done": "Hecho: este chat ya no está conectado. A partir de ahora lo trataré como una persona aparte.",
        "unlink_only": "Este chat no está conectado con ninguna otra cuenta.",
        # issue 12, faults
        "restarting": "Me estoy reiniciando. Vuelve a enviarlo en un momento, por favor.",
        "restarting_kept": "Me estoy reiniciando. Tu mensaje está guardado y te responderé en un momento.",
        # -- inbound (issue 12): the database could not take a message; it is kept in the journal
        "message_kept": (
            "Tengo tu mensaje, pero ahora mismo no puedo contestar. Lo guardo y te responderé en cuanto vuelva."
        ),
        # -- issue 13, costs: un límite de gasto impidió la llamada al modelo (bot/spend.py); el mensaje queda guardado
        "cap_reached_day": (
            "He llegado al límite de uso de hoy, así que ahora no puedo contestar. Tu mensaje está guardado: "
            "vuelve a escribirme mañana, por favor."
        ),
        "cap_reached_month": (
            "He llegado al límite de uso de este mes, así que ahora no puedo contestar. Tu mensaje está guardado: "
            "vuelve a escribirme el mes que viene, o pregunta a quien gestiona este asistente."
        ),
        # -- issue 13, data: /export (bot/commands.py, bot/export.py) and the export's download page
        "cmd_export_link": (
            "Aquí tienes todo lo que guardo sobre ti, en un archivo JSON: {url}\n"
            "El enlace funciona durante {minutes} minutos y solo abre tus datos."
        ),
        "cmd_export_document": "Todo lo que guardo sobre ti, en un archivo JSON.",
        "cmd_export_nothing": "No hay nada guardado sobre ti.",
        "cmd_export_cli": "Para exportar todo sobre {handle}, ejecuta: hilo export --user {handle} --output ARCHIVO",
        "export_link_invalid": "Este enlace de exportación no es válido o caducó: envía /export de nuevo para otro.",
        # -- issue 13, admin: the admin page (surfaces/admin.py, surfaces/admin/admin.js) and its API's errors
        "admin_title": "administración de hilo",
        "admin_sign_in_heading": "Inicia sesión en la página de administración",
        "admin_token_label": "Token de administración",
        "admin_sign_in": "Iniciar sesión",
        "admin_sign_out": "Cerrar sesión",
        "admin_people": "Personas",
        "admin_costs": "Costes",
        "admin_handle": "Nombre",
        "admin_identities": "Identidades vinculadas",
        "admin_last_seen": "Visto por última vez",
        "admin_never": "nunca",
        "admin_messages": "Mensajes",
        "admin_memories": "Recuerdos",
        "admin_cost_usd": "Coste (USD)",
        "admin_previous": "Anterior",
        "admin_next": "Siguiente",
        "admin_page_of": "{first}-{last} de {total}",
        "admin_conversations": "Conversaciones",
        "admin_no_conversations": "Sin conversaciones.",
        "admin_no_memories": "Sin recuerdos.",
        "admin_no_people": "Todavía no ha escrito nadie.",
        "admin_older": "Mensajes anteriores",
        "admin_edit": "Editar",
        "admin_save": "Guardar",
        "admin_cancel": "Cancelar",
        "admin_delete": "Borrar",
        "admin_confirm_delete": "¿Borrar este recuerdo? No se puede deshacer.",
        "admin_ended": "terminado",
        "admin_back": "Volver a personas",
        "admin_today": "Hoy (UTC)",
        "admin_month": "Este mes",
        "admin_all_time": "Desde el principio",
        "admin_calls": "Llamadas al modelo",
        "admin_tokens": "Tokens de entrada / salida",
        "admin_windows": "Ventanas de los límites",
        "admin_top": "Quién gastó más",
        "admin_everyone": "Todos",
        "admin_opted_out": "dado de baja",
        "admin_token_wrong": "Ese no es el token de administración.",
        "admin_sign_in_needed": "Inicia sesión en la página de administración primero.",
        "admin_csrf": "Este cambio no vino de la página de administración: recárgala e inténtalo de nuevo.",
        "admin_memory_ended": "Este recuerdo ya no está vigente: edita el que lo sustituyó.",
    },
}


def language(tag: str | None, default: str = "en") -> str:
    """The catalogue language for a tag like "es-ES" or an Accept-Language header value."""
    for part in (tag or "").split(","):
        primary = part.split(";")[0].strip().split("-")[0].lower()
        if primary in LANGUAGES:
            return primary
    return default if default in LANGUAGES else "en"


def t(key: str, lang: str | None = None, **params: object) -> str:
    """The text for `key` in `lang` (English when missing), formatted with `params`."""
    table = MESSAGES.get(language(lang), MESSAGES["en"])
    text = table.get(key) or MESSAGES["en"][key]
    return text.format(**params) if params else text
