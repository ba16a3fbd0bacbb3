// Produce with node-kafka 0.2.3 (a Kafka 0.7 client: magic-0 messages), then fetch them back
// with its Client and print each message; exits after `count` messages or 10 s.
var kafka = require('kafka')
var port = parseInt(process.argv[2]), topic = process.argv[3], count = parseInt(process.argv[4])
var producer = new kafka.Producer({ host: '127.0.0.1', port: port, topic: topic, partition: 0 })
producer.connect().on('connect', function() {
  var messages = []
  for (var i = 0; i < count; i++) messages.push('node message ' + i)
  producer.send(messages)
  setTimeout(function() {
    producer.close()
    var seen = 0
    var client = new kafka.Client({ host: '127.0.0.1', port: port })
    client.on('message', function(t, message, offset) {
      console.log('got ' + t + ' ' + message + ' next=' + offset)
      if (++seen == count) { client.close(); process.exit(0) }
    })
    client.on('lastmessage', function(t, offset) { client.fetchTopic({ name: t, offset: offset }) })
    client.connect(function() { client.fetchTopic({ name: topic, offset: 0 }) })
  }, 500)
})
setTimeout(function() { console.log('timeout'); process.exit(1) }, 10000)
