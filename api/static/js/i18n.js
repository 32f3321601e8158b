// Spanish (default) and English. Every key exists in both (tests/browser/test_i18n.py checks),
// and numbers, money and dates go through Intl in the page's language.
const T = {
  es: {
    fair_ok: "Tu semilla se usó: mano verificada", fair_alarm: "Alarma de juego limpio",
    fair_evidence: "Descargar la evidencia", fair_not_yet: "La transcripción aún no está disponible",
    fair_receipt_failed: "Recibo de semillas", fair_check_failed: "Verificación de la mano",
    cons_ok: "coherente con los checkpoints que guardó este navegador", cons_split: "vista dividida",
    table: "Mesa", signin: "Entrar", register: "Crear cuenta", username: "Usuario", password: "Contraseña",
    signinwhy: "Dominó caribeño por dinero, con cada mano verificable.",
    logout: "Salir", lobby: "Salón", balance: "Saldo", kind: "Modalidad", tier: "Apuesta",
    partner: "Pareja (opcional)", quickjoin: "Entrar rápido", private: "Mesa privada",
    cpu: "Contra la CPU (gratis)", invite: "Código de invitación", join: "Unirse",
    mytables: "Mis mesas", opentables: "Mesas abiertas", us: "Nosotros", them: "Ellos",
    me_score: "Yo", rivals: "Rivales",
    dealcommit: "Compromiso de la mano", myseed: "Mi semilla", ownseed: "Escribir mi propia semilla",
    sendseed: "Enviar semilla", left: "Izquierda", right: "Derecha", backlobby: "Volver al salón",
    wallet: "Billetera", date: "Fecha", what: "Concepto", amount: "Importe", movements: "Movimientos",
    selfexclude: "Autoexcluirme 30 días", history: "Historial", audit: "Auditoría",
    refresh: "Actualizar", dealid: "Mano", verify: "Verificar", keys: "Claves públicas",
    checkpoint: "Último checkpoint", consistency: "Prueba de consistencia",
    orphans: "Compromisos huérfanos", hands: "Manos", finance: "Finanzas", player: "Jugador",
    amountusd: "Importe (USD)", reference: "Referencia", deposit: "Depositar", withdraw: "Retirar",
    chaincheck: "Verificar cadena de hashes", trialbalance: "Balance de comprobación",
    commissionday: "Comisión por día", commissiontier: "Comisión por apuesta", pots: "Potes",
    statements: "Estado de cuenta", show: "Ver", admin: "Administración", create: "Crear",
    free: "Gratis", waiting: "Buscando jugadores…", open: "Abrir", yourturn: "Te toca", turnof: "Turno de",
    pass: "pasa", pass_me: "Pasas", capicua: "¡Capicúa!", pase: "¡Pase!", pase_corrido: "¡Pase corrido!",
    bonus: "Bono", matchover: "Partida terminada",
    youwin: "¡Ganaste!", youwinpair: "¡Ganaron ustedes!", youlose: "Perdiste", youlosepair: "Ganaron ellos",
    seedcommitted: "Tu semilla está comprometida", seedrevealed: "Tu semilla se usó en el reparto",
    seedwaiting: "Tu semilla se enviará al empezar la mano",
    verified: "Verificada", failed: "Falló", pending: "Comprobando…",
    seat: "Asiento", cpuplayer: "CPU", salgo: "Salgo", saltu: "Sal tú",
    claim: "Reclamar", redeal: "Pedir reparto", tranque: "¡Tranque!", sent: "Enviado",
    notcounted: "no cuenta", counted: "cuenta", checks: "Comprobaciones",
    invitesin: "Invitaciones recibidas", invitesout: "Invitaciones enviadas",
    invitedyou: "te invita como pareja", youinvited: "Invitaste a", accept: "Aceptar",
    decline: "Rechazar", cancel: "Cancelar", expiresin: "caduca en", seconds: "s",
    invitesent: "Invitación enviada a", accepted: "Invitación aceptada", bycode: "mesa con código",
    fairness: "Juego limpio", chat: "Chat", close: "Cerrar", myhand: "Mis fichas", menu: "Menú",
    reconnecting: "Conexión perdida: reconectando…", reconnected: "Conectado de nuevo",
    partnerlabel: "pareja", you: "Tú", tilesleft: "fichas",
    end_of: "Extremo", board_label: "Mesa: extremos", nothingplayed: "Sin fichas en la mesa",
    handno: "Mano", handover: "Fin de la mano",
    end_domino: "Dominó", end_tranque: "Tranque", end_target: "Llegó a la meta", end_claim: "Reclamada",
    youwonhand: "¡Ganaste la mano!", handto: "Mano para", points: "Puntos", bonuses: "Bonos", newscore: "Marcador", continue: "Seguir",
    pot: "Pote", commission: "Comisión", yourresult: "Tu resultado", settling: "Liquidando el pote…",
    playagain: "Jugar otra vez", voided: "Partida anulada: apuestas devueltas",
    choosegame: "Elige modalidad", seatsfilled: "sentados", stake: "Apuesta", seatsword: "jugadores",
    pairsword: "parejas",
    nomytables: "No estás en ninguna mesa. Elige una modalidad y pulsa «Entrar rápido».",
    noopentables: "Ninguna mesa espera jugadores ahora. Pulsa «Entrar rápido» y abrirás una.",
    noinvites: "Ninguna", nohistory: "Aún no has jugado ninguna mano. Tus manos aparecerán aquí para verificarlas.",
    nostatement: "Sin movimientos todavía.",
    st_deposit: "Depósito", st_withdrawal: "Retiro", st_stake: "Apuesta", st_hold: "Apuesta retenida",
    st_release: "Apuesta devuelta", st_payout: "Premio", st_refund: "Devolución", st_commission: "Comisión",
    st_other: "Movimiento", match: "Partida", won: "Ganada", lost: "Perdida",
    status_waiting: "Esperando jugadores", status_seated: "Completa", status_playing: "Jugando",
    status_started: "Jugando", status_finished: "Terminada", status_voided: "Anulada", status_open: "Abierta", status_settled: "Liquidado", status_void: "Anulado",
    st_settle: "Liquidación", st_void: "Anulación", st_wallet: "Billeteras de jugadores", st_pot: "Potes",
    st_cashier: "Caja (depósitos y retiros)", st_house: "Casa",
    leave: "Salir de la mesa",
    desc_apuesta: "A 200 (1v1 a 100). Pases +25, pase corrido +30; el ganador se lleva el pote menos 10%.",
    desc_dominicana: "Doble seis, a 100 o 200. Capicúa y pase de salida +25; el tranque se lleva todo.",
    desc_cubana: "Doble nueve, 10 fichas por jugador, en parejas. El tranque lo gana la suma más baja.",
    desc_casa: "Se cuentan manos ganadas: +1 por mano. El tranque se decide por la suma más baja.",
    verdict_ok: "Todo cuadra", verdict_bad: "Hay un problema",
    tb_ok: "El balance de comprobación cuadra", tb_bad: "El balance de comprobación NO cuadra",
    chain_ok: "La cadena de hashes está intacta", chain_bad: "La cadena de hashes está rota",
    verify_ok: "Mano verificada: el reparto fue justo", verify_bad: "La verificación falló",
    account: "Cuenta", currency: "Moneda", total: "Total", variant: "Juego", status: "Estado", ok: "Correcto",
    orphans_none: "Ningún compromiso huérfano.", orphans_some: "Compromisos sin mano cerrada",
    treesize: "Tamaño del registro", roothash: "Raíz", signedat: "Firmado", keyid: "Clave",
    treefirst: "Tamaño anterior del registro", treesecond: "Tamaño actual del registro",
    conshashes: "hashes en la prueba; compárela con sus checkpoints guardados",
    cashier: "Caja", exports: "Exportar (CSV)", journal: "Diario", role: "Rol",
    role_player: "Jugador", role_auditor: "Auditor", role_finance: "Finanzas", role_admin: "Administración", role_support: "Soporte", role_compliance: "Cumplimiento",
    reasonprompt: "Motivo (queda en el registro del personal):",
    lock: "Bloquear", unlock: "Desbloquear", status_active: "Activo", status_locked: "Bloqueado",
    status_excluded: "Autoexcluido", selfexcluded: "Autoexclusión hasta",
    deposited: "Depósito hecho", withdrawn: "Retiro hecho", opening: "Saldo inicial", closing: "Saldo final",
    check_ok: "correcto", check_fail: "falló", players: "Jugadores", hand_of: "Mano de",
    err_generic: "Algo salió mal. Inténtalo de nuevo.",
    chk_signature: "Firma del compromiso", chk_seed_commitments: "Semillas de los jugadores",
    chk_seed_receipt: "Recibo de semillas en el registro", chk_result_record: "Resultado firmado en el registro",
    chk_server_seed_opening: "Semilla del servidor revelada", chk_deal_recomputation: "Reparto recalculado",
    chk_replay: "Jugadas coherentes con el reparto", chk_merkle_inclusion: "Incluida en el registro público",
    chk_checkpoint_signature: "Firma del registro",
    phrase_hola: "¡Hola!", phrase_buena: "¡Buena!", phrase_bien_jugado: "Bien jugado",
    phrase_gracias: "Gracias", phrase_suerte: "Suerte", phrase_dale: "¡Dale!",
    phrase_piensa: "Piénsalo…", phrase_tranque: "¡Tranque!", phrase_capicua: "¡Capicúa!",
    phrase_otra: "¿Otra?", phrase_adios: "Adiós",
    // fairness: checkpoint policy and consistency between two sizes (audit-log.js)
    cons_pair_ok: "el registro solo creció entre estos dos checkpoints firmados",
    cons_no_checkpoint: "No hay checkpoint firmado de tamaño", cons_refused: "checkpoint rechazado",
    cons_sizes: "Indica dos tamaños: el anterior no mayor que el actual",
  },
  en: {
    fair_ok: "Your seed was used: hand verified", fair_alarm: "Fairness alarm",
    fair_evidence: "Download the evidence", fair_not_yet: "The transcript is not available yet",
    fair_receipt_failed: "Seed receipt", fair_check_failed: "Hand check",
    cons_ok: "consistent with the checkpoints this browser kept", cons_split: "split view",
    table: "Table", signin: "Sign in", register: "Create account", username: "User name", password: "Password",
    signinwhy: "Caribbean dominoes for money, every hand verifiable.",
    logout: "Sign out", lobby: "Lobby", balance: "Balance", kind: "Game", tier: "Stake",
    partner: "Partner (optional)", quickjoin: "Quick join", private: "Private table",
    cpu: "Against CPUs (free)", invite: "Invite code", join: "Join",
    mytables: "My tables", opentables: "Open tables", us: "Us", them: "Them",
    me_score: "Me", rivals: "Rivals",
    dealcommit: "Deal commitment", myseed: "My seed", ownseed: "Type my own seed",
    sendseed: "Send seed", left: "Left", right: "Right", backlobby: "Back to lobby",
    wallet: "Wallet", date: "Date", what: "Description", amount: "Amount", movements: "Transactions",
    selfexclude: "Self-exclude for 30 days", history: "History", audit: "Audit",
    refresh: "Refresh", dealid: "Hand", verify: "Verify", keys: "Public keys",
    checkpoint: "Latest checkpoint", consistency: "Consistency proof",
    orphans: "Orphan commitments", hands: "Hands", finance: "Finance", player: "Player",
    amountusd: "Amount (USD)", reference: "Reference", deposit: "Deposit", withdraw: "Withdraw",
    chaincheck: "Check hash chain", trialbalance: "Trial balance",
    commissionday: "Commission by day", commissiontier: "Commission by stake", pots: "Pots",
    statements: "Statement", show: "Show", admin: "Admin", create: "Create",
    free: "Free", waiting: "Looking for players…", open: "Open", yourturn: "Your turn", turnof: "Turn of",
    pass: "passes", pass_me: "You pass", capicua: "Capicúa!", pase: "Pass bonus!", pase_corrido: "Pase corrido!",
    bonus: "Bonus", matchover: "Match over",
    youwin: "You won!", youwinpair: "Your side won!", youlose: "You lost", youlosepair: "The other side won",
    seedcommitted: "Your seed is committed", seedrevealed: "Your seed was used in the deal",
    seedwaiting: "Your seed will be sent when the hand starts",
    verified: "Verified", failed: "Failed", pending: "Checking…",
    seat: "Seat", cpuplayer: "CPU", salgo: "I lead", saltu: "You lead",
    claim: "Claim", redeal: "Ask redeal", tranque: "Blocked!", sent: "Sent",
    notcounted: "not counted", counted: "counted", checks: "Checks",
    invitesin: "Invitations for you", invitesout: "Invitations you sent",
    invitedyou: "invites you as partner", youinvited: "You invited", accept: "Accept",
    decline: "Decline", cancel: "Cancel", expiresin: "expires in", seconds: "s",
    invitesent: "Invitation sent to", accepted: "Invitation accepted", bycode: "table with code",
    fairness: "Fair play", chat: "Chat", close: "Close", myhand: "My tiles", menu: "Menu",
    reconnecting: "Connection lost: reconnecting…", reconnected: "Connected again",
    partnerlabel: "partner", you: "You", tilesleft: "tiles",
    end_of: "End", board_label: "Table: open ends", nothingplayed: "No tiles on the table",
    handno: "Hand", handover: "Hand over",
    end_domino: "Domino", end_tranque: "Blocked game", end_target: "Reached the target", end_claim: "Claimed",
    youwonhand: "You won the hand!", handto: "Hand to", points: "Points", bonuses: "Bonuses", newscore: "Score", continue: "Continue",
    pot: "Pot", commission: "Commission", yourresult: "Your result", settling: "Settling the pot…",
    playagain: "Play again", voided: "Match voided: stakes returned",
    choosegame: "Choose a game", seatsfilled: "seated", stake: "Stake", seatsword: "players",
    pairsword: "pairs",
    nomytables: "You are not at any table. Choose a game and press “Quick join”.",
    noopentables: "No table is waiting for players now. Press “Quick join” to open one.",
    noinvites: "None", nohistory: "You have not played a hand yet. Your hands will appear here to verify.",
    nostatement: "No transactions yet.",
    st_deposit: "Deposit", st_withdrawal: "Withdrawal", st_stake: "Stake", st_hold: "Stake held",
    st_release: "Stake returned", st_payout: "Winnings", st_refund: "Refund", st_commission: "Commission",
    st_other: "Transaction", match: "Match", won: "Won", lost: "Lost",
    status_waiting: "Waiting for players", status_seated: "Full", status_playing: "Playing",
    status_started: "Playing", status_finished: "Finished", status_voided: "Voided", status_open: "Open", status_settled: "Settled", status_void: "Voided",
    st_settle: "Settlement", st_void: "Void", st_wallet: "Player wallets", st_pot: "Pots",
    st_cashier: "Cashier (deposits and withdrawals)", st_house: "House",
    leave: "Leave the table",
    desc_apuesta: "To 200 (1v1 to 100). Passes +25, pase corrido +30; the winner takes the pot less 10%.",
    desc_dominicana: "Double-six, to 100 or 200. Capicúa and opening pass +25; a blocked game takes all.",
    desc_cubana: "Double-nine, 10 tiles each, in pairs. A blocked game goes to the lowest sum.",
    desc_casa: "Hands won are counted: +1 a hand. A blocked game goes to the lowest sum.",
    verdict_ok: "Everything adds up", verdict_bad: "There is a problem",
    tb_ok: "The trial balance balances", tb_bad: "The trial balance does NOT balance",
    chain_ok: "The hash chain is intact", chain_bad: "The hash chain is broken",
    verify_ok: "Hand verified: the deal was fair", verify_bad: "Verification failed",
    account: "Account", currency: "Currency", total: "Total", variant: "Game", status: "Status", ok: "Correct",
    orphans_none: "No orphan commitments.", orphans_some: "Commitments without a closed hand",
    treesize: "Log size", roothash: "Root", signedat: "Signed", keyid: "Key",
    treefirst: "Earlier log size", treesecond: "Current log size",
    conshashes: "hashes in the proof; compare it with your saved checkpoints",
    cashier: "Cashier", exports: "Export (CSV)", journal: "Journal", role: "Role",
    role_player: "Player", role_auditor: "Auditor", role_finance: "Finance", role_admin: "Admin", role_support: "Support", role_compliance: "Compliance",
    reasonprompt: "Reason (kept in the staff audit log):",
    lock: "Lock", unlock: "Unlock", status_active: "Active", status_locked: "Locked",
    status_excluded: "Self-excluded", selfexcluded: "Self-excluded until",
    deposited: "Deposit made", withdrawn: "Withdrawal made", opening: "Opening balance", closing: "Closing balance",
    check_ok: "passed", check_fail: "failed", players: "Players", hand_of: "Hand of",
    err_generic: "Something went wrong. Please try again.",
    chk_signature: "Commitment signature", chk_seed_commitments: "Players' seeds",
    chk_seed_receipt: "Seed receipt in the log", chk_result_record: "Signed result in the log",
    chk_server_seed_opening: "Server seed revealed", chk_deal_recomputation: "Deal recomputed",
    chk_replay: "Moves consistent with the deal", chk_merkle_inclusion: "Included in the public log",
    chk_checkpoint_signature: "Log signature",
    phrase_hola: "Hi!", phrase_buena: "Nice one!", phrase_bien_jugado: "Well played",
    phrase_gracias: "Thanks", phrase_suerte: "Good luck", phrase_dale: "Go on!",
    phrase_piensa: "Thinking…", phrase_tranque: "Blocked!", phrase_capicua: "Capicúa!",
    phrase_otra: "Another?", phrase_adios: "Bye",
    // fairness: checkpoint policy and consistency between two sizes (audit-log.js)
    cons_pair_ok: "the log only grew between these two signed checkpoints",
    cons_no_checkpoint: "No signed checkpoint of size", cons_refused: "checkpoint refused",
    cons_sizes: "Give two sizes: the earlier one no larger than the current one",
  },
};
const REACTIONS = { aplauso: "👏", risa: "😂", sorpresa: "😮", fuego: "🔥", pulgar: "👍", triste: "😢" };
const LOCALES = { es: "es-419", en: "en-US" };

function stored(key) {
  try { return localStorage.getItem(key); } catch { return null; }
}

let lang = stored("mesa-lang") === "en" ? "en" : "es";

export function t(key) {
  return T[lang][key] ?? T.es[key] ?? key;
}
export function has(key) { return key in T[lang]; }
export function reaction(code) { return REACTIONS[code] || code; }
export function getLang() { return lang; }
export function locale() { return LOCALES[lang]; }
export function dictionaries() { return T; }
export function setLang(l) {
  lang = l === "en" ? "en" : "es";
  try { localStorage.setItem("mesa-lang", lang); } catch { /* private mode: not remembered */ }
  applyI18n();
}

// Integer cents in the player's language: "US$10.00" / "$10.00" as Intl writes it.
export function money(cents, currency = "USD") {
  return new Intl.NumberFormat(locale(), { style: "currency", currency, currencyDisplay: "narrowSymbol" }).format(cents / 100);
}
export function num(n) { return new Intl.NumberFormat(locale()).format(n); }
export function dateTime(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return new Intl.DateTimeFormat(locale(), { dateStyle: "medium", timeStyle: "short" }).format(d);
}

export function applyI18n(root = document) {
  document.documentElement.lang = lang;
  for (const e of root.querySelectorAll("[data-i18n]")) e.textContent = t(e.dataset.i18n);
  for (const e of root.querySelectorAll("[data-i18n-label]")) e.setAttribute("aria-label", t(e.dataset.i18nLabel));
  const b = document.getElementById("lang");
  if (b) {
    b.textContent = lang === "es" ? "EN" : "ES";
    b.setAttribute("aria-label", lang === "es" ? "English" : "Español");
    b.setAttribute("lang", lang === "es" ? "en" : "es");
  }
}
