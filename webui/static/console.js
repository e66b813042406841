// Expiry countdowns: every element with data-expires shows the time left.
(function () {
  "use strict";
  function tick() {
    var now = Date.now();
    document.querySelectorAll("[data-expires]").forEach(function (el) {
      var left = Math.floor((Date.parse(el.dataset.expires) - now) / 1000);
      if (isNaN(left)) return;
      if (left <= 0) {
        el.textContent = "(expired)";
        el.classList.add("expired");
        return;
      }
      var m = Math.floor(left / 60), s = left % 60;
      el.textContent = "(in " + m + "m " + (s < 10 ? "0" : "") + s + "s)";
    });
  }
  tick();
  setInterval(tick, 1000);
})();
