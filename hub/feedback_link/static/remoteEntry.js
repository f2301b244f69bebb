/* pkv-feedback-link: a JupyterLab extension written by hand (no build step), as a federated module container.
 *
 * nbgrader 0.9's Assignments tab shows "(view feedback)" beside a submission whose feedback was fetched; the link
 * runs JupyterLab's "filebrowser:go-to-path" on the feedback folder, <lab>/feedback/<timestamp>/, which only
 * shows the folder. This plugin watches for that command on such a folder and opens the feedback page(s) in it
 * (the .html files nbgrader fetched there), so one click shows the report. It changes nothing else: any other
 * path, or a folder without a page, is left to the file browser. JupyterLab's HTML viewer shows the page in a
 * sandboxed frame without scripts (the feedback is inert HTML: autograder/feedback/inert_html.py). */
var _JUPYTERLAB;
(function () {
  "use strict";
  var FEEDBACK_FOLDER = /(^|\/)feedback\/[^/]+\/?$/;

  function feedbackPages(listing) {
    var items = (listing && listing.content) || [];
    return items
      .filter(function (item) { return item.type === "file" && /\.html$/.test(item.name); })
      .map(function (item) { return item.path; })
      .sort();
  }

  var plugin = {
    id: "pkv-feedback-link:open-feedback",
    description: "The Assignments tab's (view feedback) link opens the feedback page.",
    autoStart: true,
    activate: function (app) {
      app.commands.commandExecuted.connect(function (sender, executed) {
        var path = executed && executed.args && executed.args.path;
        if (executed.id !== "filebrowser:go-to-path" || typeof path !== "string" || !FEEDBACK_FOLDER.test(path)) {
          return;
        }
        return app.serviceManager.contents.get(path, { content: true }).then(function (listing) {
          if (!listing || listing.type !== "directory") {
            return;
          }
          return Promise.all(feedbackPages(listing).map(function (page) {
            return app.commands.execute("docmanager:open", { path: page });
          }));
        }).catch(function (error) {
          console.warn("pkv-feedback-link: could not open the feedback in " + path, error);
        });
      });
    }
  };

  var container = {
    init: function () { return Promise.resolve(); },
    get: function (module) {
      if (module !== "./extension") {
        return Promise.reject(new Error("pkv-feedback-link has no module " + module));
      }
      return Promise.resolve(function () { return { __esModule: true, default: [plugin] }; });
    }
  };
  _JUPYTERLAB = typeof _JUPYTERLAB === "undefined" ? {} : _JUPYTERLAB;
  _JUPYTERLAB["pkv-feedback-link"] = container;
  (typeof window !== "undefined" ? window : globalThis)._JUPYTERLAB = _JUPYTERLAB;
  if (typeof module !== "undefined" && module.exports) {  /* node, for tests/course_hub */
    module.exports = { container: container, plugin: plugin, FEEDBACK_FOLDER: FEEDBACK_FOLDER };
  }
})();
