// The dashboard's page script: in-place navigation and, where the page has one, the
// assistant panel connected to the gateway.
import { startNavigation } from "./nav.js";
import { startAssistant } from "./assistant.js";

startNavigation();
const panel = document.getElementById("assistant");
if (panel && document.body.dataset.gateway) startAssistant(panel, document.body.dataset.gateway);
