// Spanish (default) and English. Codes of chat phrases and events are translated here too.
const T = {
  es: {
    signin: "Entrar", register: "Crear cuenta", username: "Usuario", password: "Contraseña",
    logout: "Salir", lobby: "Salón", balance: "Saldo", kind: "Modalidad", tier: "Apuesta",
    partner: "Pareja (opcional)", quickjoin: "Entrar rápido", private: "Mesa privada",
    cpu: "Contra la CPU (gratis)", invite: "Código de invitación", join: "Unirse",
    mytables: "Mis mesas", opentables: "Mesas abiertas", us: "Nosotros", them: "Ellos",
    dealcommit: "Compromiso de la mano", myseed: "Mi semilla", ownseed: "Escribir mi propia semilla",
    sendseed: "Enviar semilla", left: "Izquierda", right: "Derecha", backlobby: "Volver al salón",
    wallet: "Billetera", date: "Fecha", what: "Concepto", amount: "Importe",
    selfexclude: "Autoexcluirme 30 días", history: "Historial", audit: "Auditoría",
    refresh: "Actualizar", dealid: "Mano", verify: "Verificar", keys: "Claves públicas",
    checkpoint: "Último checkpoint", consistency: "Prueba de consistencia",
    orphans: "Compromisos huérfanos", hands: "Manos", finance: "Finanzas", player: "Jugador",
    amountusd: "Importe (USD)", reference: "Referencia", deposit: "Depositar", withdraw: "Retirar",
    chaincheck: "Verificar cadena de hashes", trialbalance: "Balance de comprobación",
    commissionday: "Comisión por día", commissiontier: "Comisión por apuesta", pots: "Potes",
    statements: "Estado de cuenta", show: "Ver", admin: "Administración", create: "Crear",
    free: "Gratis", waiting: "esperando", open: "Abrir", yourturn: "Te toca", turnof: "Turno de",
    pass: "pasa", capicua: "¡Capicúa!", pase: "¡Pase!", pase_corrido: "¡Pase corrido!",
    bonus: "Bono", handwon: "Mano ganada por", matchover: "Partida terminada",
    youwin: "¡Ganaron ustedes!", youlose: "Ganaron ellos", seedcommitted: "Semilla comprometida",
    seedrevealed: "Semilla revelada", verified: "Verificada", failed: "Falló", pending: "…",
    seat: "Asiento", cpuplayer: "CPU", play: "Jugar", salgo: "Salgo", saltu: "Sal tú",
    claim: "Reclamar", redeal: "Pedir reparto", tranque: "¡Tranque!", sent: "Enviado",
    notcounted: "(no cuenta)", checks: "Comprobaciones",
    invitesin: "Invitaciones recibidas", invitesout: "Invitaciones enviadas",
    invitedyou: "te invita como pareja", youinvited: "invitaste a", accept: "Aceptar",
    decline: "Rechazar", cancel: "Cancelar", expiresin: "caduca en", noinvites: "Ninguna",
    invitesent: "Invitación enviada a", accepted: "Invitación aceptada", bycode: "mesa con código",
    phrase_hola: "¡Hola!", phrase_buena: "¡Buena!", phrase_bien_jugado: "Bien jugado",
    phrase_gracias: "Gracias", phrase_suerte: "Suerte", phrase_dale: "¡Dale!",
    phrase_piensa: "Piénsalo…", phrase_tranque: "¡Tranque!", phrase_capicua: "¡Capicúa!",
    phrase_otra: "¿Otra?", phrase_adios: "Adiós",
  },
  en: {
    signin: "Sign in", register: "Create account", username: "User name", password: "Password",
    logout: "Sign out", lobby: "Lobby", balance: "Balance", kind: "Game", tier: "Stake",
    partner: "Partner (optional)", quickjoin: "Quick join", private: "Private table",
    cpu: "Against CPUs (free)", invite: "Invite code", join: "Join",
    mytables: "My tables", opentables: "Open tables", us: "Nosotros", them: "Ellos",
    dealcommit: "Deal commitment", myseed: "My seed", ownseed: "Type my own seed",
    sendseed: "Send seed", left: "Left", right: "Right", backlobby: "Back to lobby",
    wallet: "Wallet", date: "Date", what: "What", amount: "Amount",
    selfexclude: "Self-exclude for 30 days", history: "History", audit: "Audit",
    refresh: "Refresh", dealid: "Deal", verify: "Verify", keys: "Public keys",
    checkpoint: "Latest checkpoint", consistency: "Consistency proof",
    orphans: "Orphan commitments", hands: "Hands", finance: "Finance", player: "Player",
    amountusd: "Amount (USD)", reference: "Reference", deposit: "Deposit", withdraw: "Withdraw",
    chaincheck: "Check hash chain", trialbalance: "Trial balance",
    commissionday: "Commission by day", commissiontier: "Commission by stake", pots: "Pots",
    statements: "Statement", show: "Show", admin: "Admin", create: "Create",
    free: "Free", waiting: "waiting", open: "Open", yourturn: "Your turn", turnof: "Turn of",
    pass: "passes", capicua: "¡Capicúa!", pase: "Pass bonus!", pase_corrido: "Pase corrido!",
    bonus: "Bonus", handwon: "Hand won by", matchover: "Match over",
    youwin: "Your side won!", youlose: "The other side won", seedcommitted: "Seed committed",
    seedrevealed: "Seed revealed", verified: "Verified", failed: "Failed", pending: "…",
    seat: "Seat", cpuplayer: "CPU", play: "Play", salgo: "I lead", saltu: "You lead",
    claim: "Claim", redeal: "Ask redeal", tranque: "Blocked!", sent: "Sent",
    notcounted: "(not counted)", checks: "Checks",
    invitesin: "Invitations for you", invitesout: "Invitations you sent",
    invitedyou: "invites you as partner", youinvited: "you invited", accept: "Accept",
    decline: "Decline", cancel: "Cancel", expiresin: "expires in", noinvites: "None",
    invitesent: "Invitation sent to", accepted: "Invitation accepted", bycode: "table with code",
    phrase_hola: "Hi!", phrase_buena: "Nice one!", phrase_bien_jugado: "Well played",
    phrase_gracias: "Thanks", phrase_suerte: "Good luck", phrase_dale: "Go on!",
    phrase_piensa: "Thinking…", phrase_tranque: "Blocked!", phrase_capicua: "¡Capicúa!",
    phrase_otra: "Another?", phrase_adios: "Bye",
  },
};
const REACTIONS = { aplauso: "👏", risa: "😂", sorpresa: "😮", fuego: "🔥", pulgar: "👍", triste: "😢" };

let lang = localStorage.getItem("mesa-lang") || "es";

export function t(key) {
  return T[lang][key] ?? T.es[key] ?? key;
}
export function reaction(code) { return REACTIONS[code] || code; }
export function getLang() { return lang; }
export function setLang(l) {
  lang = l === "en" ? "en" : "es";
  localStorage.setItem("mesa-lang", lang);
  applyI18n();
}
export function applyI18n(root = document) {
  document.documentElement.lang = lang;
  for (const e of root.querySelectorAll("[data-i18n]")) e.textContent = t(e.dataset.i18n);
  const b = document.getElementById("lang");
  if (b) b.textContent = lang === "es" ? "EN" : "ES";
}
