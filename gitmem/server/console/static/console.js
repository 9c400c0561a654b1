// gitmem console: the only script. A scope <select> marked data-autosubmit submits its form on change
// (its Switch button stays for keyboards and for browsers without script).
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("select[data-autosubmit]").forEach(function (el) {
    el.addEventListener("change", function () { el.form.submit(); });
  });
});
